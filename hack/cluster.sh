#!/usr/bin/env bash
# A real Kubernetes cluster of one or two nodes on this machine, each node inside network,
# mount and PID namespaces of its own, for tests that need a kubelet, a container runtime,
# a controller-manager and Services (docs/cluster.md):
#
#   hack/cluster.sh up [--nodes 2]   build if needed, start, wait for every node to be
#                                    Ready; the last line printed is the admin kubeconfig's
#                                    path. One node unless --nodes says two.
#   hack/cluster.sh load FILE.tar    import an image (docker-load or OCI layout tarball)
#                                    into every node
#   hack/cluster.sh exec [--node NAME] -- CMD...
#                                    run CMD with the caller's environment, on this
#                                    machine's file system, in the first node's network
#                                    namespace (or NAME's), with KUBECONFIG set and
#                                    kubectl on PATH
#   hack/cluster.sh down             stop it and remove what it made (safe to repeat)
#   hack/cluster.sh status           "running", or "stopped" and what a run left on the
#                                    host (exit 1 if anything)
#   hack/cluster.sh build            only build the binaries (prints their directory)
#
# State (certificates, etcd, containerd, the kubelets, logs) is in bin/cluster, or
# $FUSEBOX_CLUSTER_DIR; binaries are cached in ~/.local/share/fusebox-cluster.
set -euo pipefail
# shellcheck source=cluster/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/cluster/env.sh"

kubeconfig="${state}/kubeconfig"
cni_bin="${CNI_PLUGINS_DIR:-/usr/lib/cni}"
pause_tar="${state}/images/pause.tar"

die() { ts "$*"; exit 1; }

# node_pid I prints the host PID of node I's node.sh, the first process of its
# namespaces, if it is running.
node_pid() {
	local pid file
	file="$(node_pid_file "$1")"
	[[ -f ${file} ]] || return 1
	pid="$(cat "${file}")"
	[[ -n ${pid} ]] && kill -0 "${pid}" 2>/dev/null || return 1
	# The PID could have been reused: it must be a process in a PID namespace of its own.
	[[ "$(readlink "/proc/${pid}/ns/pid")" != "$(readlink /proc/self/ns/pid)" ]] || return 1
	echo "${pid}"
}

# started_nodes is how many nodes the last up configured (0 after down).
started_nodes() {
	local i n=0
	for ((i = 0; i < max_nodes; i++)); do [[ -f "$(node_env_file "${i}")" ]] && n=$((i + 1)); done
	echo "${n}"
}

# node_index NAME prints the index of the node named NAME.
node_index() {
	local i
	for ((i = 0; i < max_nodes; i++)); do [[ ${node_names[i]} != "$1" ]] || { echo "${i}"; return 0; }; done
	return 1
}

# cluster_bin prints the directory of the binaries the running cluster was started with.
cluster_bin() { sed -n "s/^bin='\(.*\)'$/\1/p" "$(node_env_file 0)"; }

# in_node I CMD...: CMD in node I's network namespace only: this file system, this
# working directory, the caller's environment but for what a command of the cluster
# needs (the kubeconfig, the cluster's binaries first on PATH, kubectl's and Helm's
# caches in the state directory), the node's addresses.
in_node() {
	local pid bin i=$1
	shift
	pid="$(node_pid "${i}")" || die "${node_names[i]} is not running (hack/cluster.sh up)"
	bin="$(cluster_bin)"
	nsenter --target "${pid}" --net -- env \
		KUBECONFIG="${kubeconfig}" PATH="${bin}:${PATH}" \
		KUBECACHEDIR="${state}/data/kube-cache" \
		HELM_CACHE_HOME="${state}/data/helm/cache" HELM_CONFIG_HOME="${state}/data/helm/config" \
		HELM_DATA_HOME="${state}/data/helm/data" \
		"$@"
}

# nodes_ready N: the first N nodes are registered and Ready.
nodes_ready() {
	local got i
	got="$(in_node 0 kubectl get nodes -o \
		'jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' 2>/dev/null)" || return 1
	for ((i = 0; i < $1; i++)); do
		grep -qx "${node_names[i]}=True" <<<"${got}" || return 1
	done
}

preflight() {
	local missing=() c
	for c in nsenter unshare setsid pgrep ip iptables conntrack openssl runc mount; do
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

# make_cgroup_roots N creates the parent cgroup of each of the first N nodes in every
# hierarchy; the kubelet requires it to exist. A new cpuset cgroup starts with no CPUs
# and no memory nodes: it gets its parent's.
make_cgroup_roots() {
	local h i dir parent
	for ((i = 0; i < $1; i++)); do
		dir="$(node_cgroup_root "${i}")"
		if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then # cgroup v2 only
			mkdir -p "/sys/fs/cgroup/${dir}"
			continue
		fi
		for h in /sys/fs/cgroup/*/; do
			[[ -L ${h%/} ]] && continue
			mkdir -p "${h}${dir}"
		done
		if [[ -f /sys/fs/cgroup/cpuset/cpuset.cpus ]]; then
			parent="$(dirname "/sys/fs/cgroup/cpuset/${dir}")"
			cat "${parent}/cpuset.cpus" >"/sys/fs/cgroup/cpuset/${dir}/cpuset.cpus"
			cat "${parent}/cpuset.mems" >"/sys/fs/cgroup/cpuset/${dir}/cpuset.mems"
		fi
	done
}

# The pause image, built by hack/image from hack/pause, rebuilt when its source changes.
build_pause() {
	local src="${repo_root}/hack/pause/main.go"
	[[ -f ${pause_tar} && ${pause_tar} -nt ${src} ]] && return 0
	ts "building ${pause_image} (hack/pause)"
	mkdir -p "${state}/images"
	(cd "${repo_root}/hack/image" && GOWORK=off go run . -root "${repo_root}" -package ./hack/pause \
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

# start_node I starts node I's namespaces, node.sh their first process.
start_node() {
	local i=$1 env pid="" p unshare_pid
	env="$(node_env_file "${i}")"
	ts "starting ${node_names[i]}'s namespaces"
	# setsid: the cluster outlives this command and its terminal. --fork: node.sh is
	# PID 1 of the new PID namespace, whose end kills every process in it.
	setsid unshare --pid --fork --mount-proc --mount --propagation private --net \
		"${cluster_hack}/node.sh" "${env}" \
		>"${state}/logs$(node_subdir "${i}")/node.log" 2>&1 </dev/null &
	# node.sh is the process running it with this node's file that is PID 1 of its own
	# namespace (the last of its NSpid). Not simply the background job's first child: the
	# job's shell, setsid and unshare each may or may not fork on the way, and a process
	# seen before unshare has made the namespaces is still in this machine's.
	for _ in $(seq 100); do
		for p in $(pgrep -f -- "/node.sh ${env}$" || true); do
			[[ "$(awk '/^NSpid:/ {print $NF}' "/proc/${p}/status" 2>/dev/null)" != 1 ]] || pid=${p}
		done
		[[ -z ${pid} ]] || break
		sleep 0.05
	done
	[[ -n ${pid} ]] || die "unshare did not start node.sh for ${node_names[i]}"
	echo "${pid}" >"$(node_pid_file "${i}")"
	# down waits for unshare, node.sh's parent, to go: then the namespaces are gone.
	unshare_pid="$(awk '/^PPid:/ {print $2}' "/proc/${pid}/status")"
	echo "${unshare_pid}" >"$(node_unshare_file "${i}")"
	# For status: a process left in one of these after down is a leak.
	readlink "/proc/${pid}/ns/pid" "/proc/${pid}/ns/net" "/proc/${pid}/ns/mnt" >>"${state}/namespaces"
}

# link_second_node moves the spare end of the first node's veth pair into the second
# node's network namespace (node.sh renames it there and puts the node's address on it),
# once the first node has brought it up and no longer touches it. `ip` runs in the first
# node's network namespace but this PID namespace, where the second node's PID names its
# network namespace.
link_second_node() {
	local first second
	first="$(node_pid 0)" || die "${node_names[0]} stopped while starting"
	second="$(node_pid 1)" || die "${node_names[1]} stopped while starting"
	# The network rule: the link goes into the second node's namespace, never this machine's.
	[[ "$(readlink "/proc/${second}/ns/net")" != "$(readlink /proc/self/ns/net)" ]] ||
		die "${node_names[1]} (pid ${second}) is in this machine's network namespace"
	for _ in $(seq 200); do
		nsenter --target "${first}" --net -- ip -o link show fusebox1 2>/dev/null | grep -q '[<,]UP[,>]' && break
		sleep 0.05
	done
	nsenter --target "${first}" --net -- ip link set fusebox1 netns "${second}" ||
		die "could not link ${node_names[1]} to ${node_names[0]}"
	ts "linked ${node_names[1]} to ${node_names[0]}"
}

cmd_up() {
	local nodes=1 pid i running
	while (($#)); do
		case $1 in
		--nodes)
			(($# >= 2)) || die "--nodes needs a number"
			nodes=$2
			shift 2
			;;
		--nodes=*) nodes=${1#--nodes=} && shift ;;
		*) die "usage: hack/cluster.sh up [--nodes N]" ;;
		esac
	done
	if ! [[ ${nodes} =~ ^[0-9]+$ ]] || ((nodes < 1 || nodes > max_nodes)); then
		die "--nodes takes 1 to ${max_nodes}, not '${nodes}'"
	fi
	if pid="$(node_pid 0)"; then
		running="$(started_nodes)"
		((running == nodes)) ||
			die "the cluster is running with ${running} node(s) (pid ${pid}); hack/cluster.sh down first to start ${nodes}"
		nodes_ready "${nodes}" || die "the cluster is running (pid ${pid}) but not every node is Ready; hack/cluster.sh down first"
		ts "already running (pid ${pid})"
		echo "${kubeconfig}"
		return 0
	fi
	cmd_down >/dev/null 2>&1 || true # what an earlier run may have left
	preflight
	# The scripts up runs report times from its start.
	export cluster_t0
	bin="$("${cluster_hack}/build.sh")"
	build_pause
	ts "binaries and pause image ready"

	# From here on a failure, or Ctrl-C, takes the cluster down again.
	# shellcheck disable=SC2154 # rc is assigned in the trap
	trap 'rc=$?; trap - EXIT; if ((rc)); then ts "up failed (logs: ${state}/logs)"; cmd_down >&2; fi; exit ${rc}' EXIT
	trap 'exit 130' INT TERM
	mkdir -p "${state}/data/tmp" "${state}/logs"
	for ((i = 0; i < max_nodes; i++)); do rm -f "${state}/logs$(node_subdir "${i}")"/*.log; done
	: >"${state}/namespaces"
	host_sysctls >"${state}/host-sysctls"
	make_cgroup_roots "${nodes}"
	"${cluster_hack}/pki.sh" "${state}" "${nodes}"
	# shellcheck source=cluster/config.sh
	source "${cluster_hack}/config.sh"
	for ((i = 0; i < nodes; i++)); do write_node_config "${i}" "${nodes}"; done
	ts "certificates and configuration written"

	# The nodes start together; a second node waits in node.sh for its link, then for the
	# first node's API server.
	for ((i = 0; i < nodes; i++)); do start_node "${i}"; done
	((nodes < 2)) || link_second_node

	local last=() now log deadline=$((SECONDS + 180)) started
	while ((SECONDS < deadline)); do
		started=0
		for ((i = 0; i < nodes; i++)); do
			log="${state}/logs$(node_subdir "${i}")/node.log"
			node_pid "${i}" >/dev/null || die "${node_names[i]} stopped while starting:
$(tail -5 "${log}")"
			# The log is created by the background start, which may not have run yet.
			now="$(tail -1 "${log}" 2>/dev/null)" || now=""
			[[ ${now} == "${last[i]:-}" ]] || ts "${now}"
			last[i]=${now}
			[[ ${now} != *"all started" ]] || started=$((started + 1))
		done
		if ((started == nodes)) && nodes_ready "${nodes}"; then break; fi
		sleep 0.2
	done
	nodes_ready "${nodes}" || die "not every node became Ready in 180 s (logs: ${state}/logs)"
	ts "${node_names[*]:0:nodes} Ready"
	# What a pod's creation needs besides the node: the namespace's ServiceAccount and
	# the API server's CA that the kubelet projects into every pod.
	deadline=$((SECONDS + 60))
	while ((SECONDS < deadline)); do
		in_node 0 kubectl -n default get serviceaccount/default configmap/kube-root-ca.crt >/dev/null 2>&1 && break
		sleep 0.2
	done
	in_node 0 kubectl -n default get serviceaccount/default configmap/kube-root-ca.crt >/dev/null ||
		die "no default ServiceAccount or kube-root-ca.crt in 60 s"
	trap - EXIT INT TERM
	ts "ready: hack/cluster.sh exec -- kubectl get pods -A"
	echo "${kubeconfig}"
}

cmd_down() {
	local i pid pids=()
	# Every node at once: the second node's end takes the link between them with it.
	for ((i = max_nodes - 1; i >= 0; i--)); do
		pid="$(node_pid "${i}")" || continue
		ts "stopping ${node_names[i]} (pid ${pid})"
		kill -TERM "${pid}" 2>/dev/null || true
		pids+=("${pid}")
	done
	if ((${#pids[@]})); then
		for _ in $(seq 150); do
			kill -0 "${pids[@]}" 2>/dev/null || break
			sleep 0.1
		done
		# The end of PID 1 ends the namespace and every process in it.
		kill -KILL "${pids[@]}" 2>/dev/null || true
	fi
	for ((i = 0; i < max_nodes; i++)); do
		[[ -f "$(node_unshare_file "${i}")" ]] || continue
		pid="$(cat "$(node_unshare_file "${i}")")"
		for _ in $(seq 100); do
			[[ "$(cat "/proc/${pid}/comm" 2>/dev/null)" == unshare ]] || break
			sleep 0.1
		done
	done
	# The kubelets' cgroups (cgroupfs) are the one thing outside the namespaces; empty
	# once their processes are gone. Only this cluster's (cgroup_root, env.sh), every
	# node's inside it.
	local dir
	for dir in $(leftover_cgroups); do
		find "${dir}" -depth -type d -exec rmdir {} + 2>/dev/null || true
	done
	# A process of the namespaces still exiting can write as this runs: try again.
	for _ in 1 2 3 4 5; do
		rm -rf "${state}/data" "${state}/pki" "${state}/conf" "${state}"/*.kubeconfig "${kubeconfig}" \
			"${state}"/node*.pid "${state}"/unshare*.pid 2>/dev/null && break
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
	local pid i nodes rc=0
	if pid="$(node_pid 0)"; then
		echo "running (pid ${pid}), kubeconfig ${kubeconfig}"
		nodes="$(started_nodes)"
		for ((i = 1; i < nodes; i++)); do
			if pid="$(node_pid "${i}")"; then
				echo "${node_names[i]} running (pid ${pid})"
			else
				echo "${node_names[i]} stopped (logs: ${state}/logs$(node_subdir "${i}"))"
				rc=1
			fi
		done
		return "${rc}"
	fi
	echo "stopped"
	local left=() p line ns namespaces="" own
	[[ ! -f ${state}/namespaces ]] || namespaces="$(cat "${state}/namespaces")"
	# This machine's own namespaces are never the cluster's, whatever a broken run noted.
	own="$(readlink /proc/self/ns/pid /proc/self/ns/net /proc/self/ns/mnt)"
	# Processes: in the last run's namespaces (every node's), in this cluster's cgroups, or
	# with its state directory on their command line (another checkout's cluster is not
	# this one's).
	for p in /proc/[0-9]*; do
		line="$(tr '\0' ' ' 2>/dev/null <"${p}/cmdline")" || continue
		[[ ${p#/proc/} != "$$" ]] || continue
		for ns in pid net mnt; do
			ns="$(readlink "${p}/ns/${ns}" 2>/dev/null)" || continue
			[[ -z ${namespaces} || ${namespaces} != *"${ns}"* || ${own} == *"${ns}"* ]] || { line="(in the cluster's namespaces) ${line}"; break; }
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
	for line in fusebox-pods fusebox0 fusebox1 fusebox-wire; do
		ip link show "${line}" >/dev/null 2>&1 && left+=("interface ${line} on the host")
	done
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

# cmd_load FILE imports the image into every node's containerd at once, each inside its
# node's mount namespace (containerd's socket is in the node's private /run).
cmd_load() {
	local file i nodes pid bin out=() pids=() rc=0
	[[ $# -eq 1 && -f $1 ]] || die "usage: hack/cluster.sh load FILE.tar (one file)"
	file="$(realpath "$1")" # nsenter --mount starts in /
	nodes="$(started_nodes)"
	if ((nodes == 0)) || ! node_pid 0 >/dev/null; then die "the cluster is not running (hack/cluster.sh up)"; fi
	bin="$(cluster_bin)"
	for ((i = 0; i < nodes; i++)); do
		pid="$(node_pid "${i}")" || die "${node_names[i]} is not running: hack/cluster.sh down, then up"
		out[i]="$(mktemp)"
		nsenter --target "${pid}" --mount -- "${bin}/ctr" --address /run/containerd/containerd.sock \
			-n k8s.io images import --platform "linux/${goarch}" "${file}" >"${out[i]}" 2>&1 &
		pids[i]=$!
	done
	for ((i = 0; i < nodes; i++)); do
		if wait "${pids[i]}"; then
			sed "s/^/${node_names[i]}: /" "${out[i]}"
		else
			sed "s/^/${node_names[i]}: /" "${out[i]}" >&2
			ts "could not load ${file} into ${node_names[i]}"
			rc=1
		fi
		rm -f "${out[i]}"
	done
	return "${rc}"
}

# cmd_exec [--node NAME] [--] CMD...
cmd_exec() {
	local i=0
	if [[ ${1:-} == --node ]]; then
		i="$(node_index "${2:-}")" || die "no node named '${2:-}' (the nodes: ${node_names[*]})"
		(($(started_nodes) > i)) || die "${node_names[i]} was not started (hack/cluster.sh up --nodes $((i + 1)))"
		shift 2
	fi
	[[ ${1:-} != -- ]] || shift
	(($#)) || die "usage: hack/cluster.sh exec [--node NAME] -- CMD..."
	in_node "${i}" "$@"
}

case "${1:-}" in
up) shift && cmd_up "$@" ;;
down) cmd_down ;;
status) cmd_status ;;
build) "${cluster_hack}/build.sh" ;;
load) shift && cmd_load "$@" ;;
exec) shift && cmd_exec "$@" ;;
*)
	sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'
	exit 2
	;;
esac
