#!/usr/bin/env bash
# A real single-node Kubernetes cluster on this machine, inside network, mount and PID
# namespaces of its own, for tests that need a kubelet, a container runtime, a
# controller-manager and Services (docs/cluster.md):
#
#   hack/cluster.sh up               build if needed, start, wait for the node to be Ready;
#                                    the last line printed is the admin kubeconfig's path
#   hack/cluster.sh load FILE.tar... import images (docker-load or OCI layout tarballs)
#   hack/cluster.sh exec -- CMD...   run CMD on this machine's file system, in the
#                                    cluster's network namespace, with KUBECONFIG set and
#                                    kubectl on PATH
#   hack/cluster.sh down             stop it and remove what it made (safe to repeat)
#   hack/cluster.sh status           "running", or "stopped" and what a run left on the
#                                    host (exit 1 if anything)
#   hack/cluster.sh build            only build the binaries (prints their directory)
#
# State (certificates, etcd, containerd, the kubelet, logs) is in bin/cluster, or
# $FUSEBOX_CLUSTER_DIR; binaries are cached in ~/.local/share/fusebox-cluster.
set -euo pipefail
# shellcheck source=cluster/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/cluster/env.sh"

kubeconfig="${state}/kubeconfig"
pidfile="${state}/node.pid"
cni_bin="${CNI_PLUGINS_DIR:-/usr/lib/cni}"
pause_tar="${state}/images/pause.tar"

die() { ts "$*"; exit 1; }

# node_pid prints the host PID of node.sh, the first process of the namespaces, if it
# is running.
node_pid() {
	local pid
	[[ -f ${pidfile} ]] || return 1
	pid="$(cat "${pidfile}")"
	[[ -n ${pid} ]] && kill -0 "${pid}" 2>/dev/null || return 1
	# The PID could have been reused: it must be a process in a PID namespace of its own.
	[[ "$(readlink "/proc/${pid}/ns/pid")" != "$(readlink /proc/self/ns/pid)" ]] || return 1
	echo "${pid}"
}

# in_cluster CMD...: CMD in the cluster's network namespace only: this file system,
# this working directory, the cluster's addresses.
in_cluster() {
	local pid bin
	pid="$(node_pid)" || die "the cluster is not running (hack/cluster.sh up)"
	bin="$(sed -n "s/^bin='\(.*\)'$/\1/p" "${state}/conf/node.env")"
	nsenter --target "${pid}" --net -- env \
		KUBECONFIG="${kubeconfig}" PATH="${bin}:${PATH}" \
		KUBECACHEDIR="${state}/data/kube-cache" \
		HELM_CACHE_HOME="${state}/data/helm/cache" HELM_CONFIG_HOME="${state}/data/helm/config" \
		HELM_DATA_HOME="${state}/data/helm/data" \
		"$@"
}

node_ready() {
	[[ "$(in_cluster kubectl get node "${node_name}" \
		-o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" == True ]]
}

preflight() {
	local missing=() c
	for c in nsenter unshare setsid ip iptables conntrack openssl runc mount; do
		command -v "${c}" >/dev/null || missing+=("${c}")
	done
	[[ -x ${cni_bin}/bridge && -x ${cni_bin}/host-local && -x ${cni_bin}/loopback ]] ||
		missing+=("CNI plugins in ${cni_bin}")
	((${#missing[@]} == 0)) || die "missing: ${missing[*]}
  apt-get install -y runc containernetworking-plugins iptables conntrack iproute2 openssl util-linux"
	((EUID == 0)) || die "hack/cluster.sh needs root (namespaces, mounts, cgroups)"
	local left
	left="$(leftover_cgroups)"
	[[ -z ${left} ]] || die "cgroups of an earlier run are still in use: ${left}"
}

# make_cgroup_root creates this cluster's parent cgroup in every hierarchy; the kubelet
# requires it to exist. A new cpuset cgroup starts with no CPUs and no memory nodes:
# it gets its parent's.
make_cgroup_root() {
	local h
	if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then # cgroup v2 only
		mkdir -p "/sys/fs/cgroup/${cgroup_root}"
		return 0
	fi
	for h in /sys/fs/cgroup/*/; do
		[[ -L ${h%/} ]] && continue
		mkdir -p "${h}${cgroup_root}"
	done
	if [[ -f /sys/fs/cgroup/cpuset/cpuset.cpus ]]; then
		cat /sys/fs/cgroup/cpuset/cpuset.cpus >"/sys/fs/cgroup/cpuset/${cgroup_root}/cpuset.cpus"
		cat /sys/fs/cgroup/cpuset/cpuset.mems >"/sys/fs/cgroup/cpuset/${cgroup_root}/cpuset.mems"
	fi
}

# The pause image, built by hack/image from hack/pause, rebuilt when its source changes.
build_pause() {
	local src="${repo_root}/hack/pause/main.go"
	[[ -f ${pause_tar} && ${pause_tar} -nt ${src} ]] && return 0
	ts "building ${pause_image} (hack/pause)"
	mkdir -p "${state}/images"
	(cd "${repo_root}/hack/image" && go run . -root "${repo_root}" -package ./hack/pause \
		-entrypoint /pause -title fusebox-pause -platforms "linux/${goarch}" \
		-tag "${pause_image}" -layout "${state}/images/pause" -archive "${pause_tar}") >&2
	rm -rf "${state}/images/pause"
}

# The host settings a kubelet or kube-proxy could change, recorded by up and compared by
# status.
host_sysctls() {
	local k
	for k in vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops \
		kernel/keys/root_maxkeys kernel/keys/root_maxbytes net/ipv4/ip_forward \
		net/ipv4/conf/all/route_localnet net/bridge/bridge-nf-call-iptables \
		net/netfilter/nf_conntrack_max; do
		[[ -r /proc/sys/${k} ]] && echo "${k}=$(cat "/proc/sys/${k}")"
	done
	return 0
}

cmd_up() {
	local pid
	if pid="$(node_pid)"; then
		node_ready || die "the cluster is running (pid ${pid}) but its node is not Ready; hack/cluster.sh down first"
		ts "already running (pid ${pid})"
		echo "${kubeconfig}"
		return 0
	fi
	cmd_down >/dev/null 2>&1 || true # what an earlier run may have left
	preflight
	bin="$("${cluster_hack}/build.sh")"
	build_pause
	ts "binaries and pause image ready"

	# From here on a failure, or Ctrl-C, takes the cluster down again.
	# shellcheck disable=SC2154 # rc is assigned in the trap
	trap 'rc=$?; trap - EXIT; if ((rc)); then ts "up failed (logs: ${state}/logs)"; cmd_down >&2; fi; exit ${rc}' EXIT
	trap 'exit 130' INT TERM
	mkdir -p "${state}/data/tmp" "${state}/logs"
	rm -f "${state}"/logs/*.log
	host_sysctls >"${state}/host-sysctls"
	make_cgroup_root
	"${cluster_hack}/pki.sh" "${state}"
	# shellcheck source=cluster/config.sh
	source "${cluster_hack}/config.sh"
	ts "certificates and configuration written"

	ts "starting the node's namespaces"
	# setsid: the cluster outlives this command and its terminal. --fork: node.sh is
	# PID 1 of the new PID namespace, whose end kills every process in it.
	setsid unshare --pid --fork --mount-proc --mount --propagation private --net \
		"${cluster_hack}/node.sh" "${state}" >"${state}/logs/node.log" 2>&1 </dev/null &
	local unshare_pid=$!
	echo "${unshare_pid}" >"${state}/unshare.pid"
	for _ in $(seq 100); do
		read -r pid _ 2>/dev/null <"/proc/${unshare_pid}/task/${unshare_pid}/children" || true
		[[ -z ${pid} ]] || break
		sleep 0.05
	done
	[[ -n ${pid} ]] || die "unshare did not start node.sh"
	echo "${pid}" >"${pidfile}"
	# For status: a process left in one of these after down is a leak.
	readlink "/proc/${pid}/ns/pid" "/proc/${pid}/ns/net" "/proc/${pid}/ns/mnt" >"${state}/namespaces"

	local last="" deadline=$((SECONDS + 180))
	while ((SECONDS < deadline)); do
		node_pid >/dev/null || die "the node stopped while starting:
$(tail -5 "${state}/logs/node.log")"
		if [[ -f ${state}/logs/node.log ]]; then
			local now
			now="$(tail -1 "${state}/logs/node.log")"
			[[ ${now} == "${last}" ]] || ts "${now}"
			last=${now}
		fi
		if [[ ${last} == *"all started" ]] && node_ready; then break; fi
		sleep 0.2
	done
	node_ready || die "the node did not become Ready in 180 s (logs: ${state}/logs)"
	ts "node ${node_name} Ready"
	# What a pod's creation needs besides the node: the namespace's ServiceAccount and
	# the API server's CA that the kubelet projects into every pod.
	deadline=$((SECONDS + 60))
	while ((SECONDS < deadline)); do
		in_cluster kubectl -n default get serviceaccount/default configmap/kube-root-ca.crt >/dev/null 2>&1 && break
		sleep 0.2
	done
	in_cluster kubectl -n default get serviceaccount/default configmap/kube-root-ca.crt >/dev/null ||
		die "no default ServiceAccount or kube-root-ca.crt in 60 s"
	trap - EXIT INT TERM
	ts "ready: hack/cluster.sh exec -- kubectl get pods -A"
	echo "${kubeconfig}"
}

cmd_down() {
	local pid
	if pid="$(node_pid)"; then
		ts "stopping the node (pid ${pid})"
		kill -TERM "${pid}" 2>/dev/null || true
		for _ in $(seq 150); do
			kill -0 "${pid}" 2>/dev/null || break
			sleep 0.1
		done
		# The end of PID 1 ends the namespace and every process in it.
		kill -KILL "${pid}" 2>/dev/null || true
	fi
	if [[ -f ${state}/unshare.pid ]]; then
		pid="$(cat "${state}/unshare.pid")"
		for _ in $(seq 100); do
			[[ "$(cat "/proc/${pid}/comm" 2>/dev/null)" == unshare ]] || break
			sleep 0.1
		done
	fi
	# The kubelet's cgroups (cgroupfs) are the one thing outside the namespaces; empty
	# once their processes are gone. Only this cluster's (cgroup_root, env.sh).
	local dir
	for dir in $(leftover_cgroups); do
		find "${dir}" -depth -type d -exec rmdir {} + 2>/dev/null || true
	done
	# A process of the namespace still exiting can write as this runs: try again.
	for _ in 1 2 3 4 5; do
		rm -rf "${state}/data" "${state}/pki" "${state}/conf" "${state}"/*.kubeconfig "${kubeconfig}" \
			"${pidfile}" "${state}/unshare.pid" 2>/dev/null && break
		sleep 0.5
	done
	[[ ! -e ${state}/data ]] || die "could not remove ${state}/data"
	ts "stopped"
}

leftover_cgroups() {
	local d
	for d in /sys/fs/cgroup/*/"${cgroup_root}" "/sys/fs/cgroup/${cgroup_root}"; do
		[[ -d ${d} && ! -L ${d%/*} ]] && echo "${d}"
	done
	return 0
}

cmd_status() {
	local pid
	if pid="$(node_pid)"; then
		echo "running (pid ${pid}), kubeconfig ${kubeconfig}"
		return 0
	fi
	echo "stopped"
	local left=() p line ns namespaces=""
	[[ ! -f ${state}/namespaces ]] || namespaces="$(cat "${state}/namespaces")"
	# Processes: in the last run's namespaces, in this cluster's cgroups, or with its
	# state directory on their command line (another checkout's cluster is not this one's).
	for p in /proc/[0-9]*; do
		line="$(tr '\0' ' ' 2>/dev/null <"${p}/cmdline")" || continue
		[[ ${p#/proc/} != "$$" ]] || continue
		for ns in pid net mnt; do
			ns="$(readlink "${p}/ns/${ns}" 2>/dev/null)" || continue
			[[ -z ${namespaces} || ${namespaces} != *"${ns}"* ]] || { line="(in the cluster's namespaces) ${line}"; break; }
		done
		if [[ ${line} == "(in the cluster's namespaces)"* || ${line} == *"${state}/"* ]] ||
			grep -q "${cgroup_root}" "${p}/cgroup" 2>/dev/null; then
			left+=("process ${p#/proc/}: ${line:0:160}")
		fi
	done
	while read -r line; do left+=("mount: ${line}"); done < <(grep -F -e "${state}" -e fusebox-run -e fusebox-varlib /proc/self/mountinfo || true)
	for line in $(leftover_cgroups); do left+=("cgroup: ${line}"); done
	if command -v iptables-save >/dev/null; then
		while read -r line; do left+=("iptables: ${line}"); done < <(iptables-save 2>/dev/null | grep -E 'KUBE-|CNI-|fusebox' || true)
	fi
	ip link show fusebox-pods >/dev/null 2>&1 && left+=("interface fusebox-pods on the host")
	ip link show fusebox0 >/dev/null 2>&1 && left+=("interface fusebox0 on the host")
	if [[ -f ${state}/host-sysctls ]]; then
		while read -r line; do left+=("sysctl changed: ${line}"); done < <(diff <(cat "${state}/host-sysctls") <(host_sysctls) | grep '^>' || true)
	fi
	for line in /var/lib/kubelet /var/lib/cni /var/lib/containerd /run/containerd /etc/cni/net.d \
		/var/log/pods /var/log/containers /opt/containerd /usr/libexec/kubernetes \
		"${HOME}/.kube/cache/discovery/${node_ip}_6443"; do
		[[ -e ${line} ]] && left+=("file: ${line}")
	done
	((${#left[@]} == 0)) && { echo "nothing left on the host"; return 0; }
	printf 'left on the host: %s\n' "${left[@]}"
	return 1
}

case "${1:-}" in
up) cmd_up ;;
down) cmd_down ;;
status) cmd_status ;;
build) "${cluster_hack}/build.sh" ;;
load)
	shift
	(($#)) || die "usage: hack/cluster.sh load FILE.tar..."
	# Every file checked before any is imported: a typo in the second does not leave the
	# first loaded and the caller guessing which.
	files=()
	for f in "$@"; do
		[[ -f ${f} ]] || die "load: ${f}: no such file"
		files+=("$(realpath "${f}")") # nsenter --mount starts in /
	done
	pid="$(node_pid)" || die "the cluster is not running (hack/cluster.sh up)"
	# shellcheck source=/dev/null # written by up
	source "${state}/conf/node.env"
	for f in "${files[@]}"; do
		# Inside the mount namespace: containerd's socket is in its private /run.
		nsenter --target "${pid}" --mount -- "${bin}/ctr" --address /run/containerd/containerd.sock \
			-n k8s.io images import --platform "linux/${goarch}" "${f}"
	done
	;;
exec)
	shift
	[[ ${1:-} != -- ]] || shift
	(($#)) || die "usage: hack/cluster.sh exec -- CMD..."
	in_cluster "$@"
	;;
*)
	sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'
	exit 2
	;;
esac
