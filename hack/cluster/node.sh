#!/usr/bin/env bash
# node.sh NODE_ENV: the first process of one node's own PID, mount and network
# namespaces (hack/cluster.sh up starts it with unshare, and writes NODE_ENV). It
# prepares the namespaces and starts the node's components: on the first node (role
# control-plane) etcd, containerd, the control plane, kube-proxy and the kubelet; on
# another (role worker) containerd, kube-proxy and the kubelet, joined to the first
# node's API server. Then it waits.
# On SIGTERM it stops them and exits; the kernel then kills whatever is left in the
# PID namespace (pods, shims), and the mount namespace, with every mount below, goes
# away with its last process. So nothing it does outlives it on the host.
# shellcheck disable=SC2154 # bin, node_ip and the rest come from node.env
set -euo pipefail
# shellcheck source=/dev/null # written by hack/cluster.sh up (config.sh)
source "$1"
pki="${state}/pki"
export PATH="${bin}:${PATH}" TMPDIR="${data}/tmp"
ts() {
	local ms=$(($(date +%s%3N) - cluster_t0))
	printf '%s [%d.%03ds] %s\n' "${node_name}" $((ms / 1000)) $((ms % 1000)) "$*"
}

# --- file system. Mounts made here stay in this mount namespace (unshare made its
# propagation private); each covers a host path a component writes to without asking.
# /run: containerd's and runc's state, the CNI address allocations. --no-mtab: mount(8)
# would otherwise record this mount in /run/mount/utab, which, before the tmpfs covers it,
# is the host's /run (a fresh machine then has a /run/mount it did not have).
mount --no-mtab -t tmpfs -o mode=0755 fusebox-run /run
# /var/log: the kubelet's /var/log/pods and /var/log/containers.
mkdir -p "${data}/varlog" "${data}/varlib/upper" "${data}/varlib/work" "${data}/sysctl" "${TMPDIR}"
mount --bind "${data}/varlog" /var/log
# /var/lib: paths that are built in, not configurable (the kubelet's device-plugin
# socket, libcni's result cache in /var/lib/cni): written to an overlay whose upper
# layer is in the state directory; the host's /var/lib is only read.
mount -t overlay fusebox-varlib -o "lowerdir=/var/lib,upperdir=${data}/varlib/upper,workdir=${data}/varlib/work" /var/lib
# The kubelet sets these host-wide sysctls (and there is no namespace for them): each is
# covered by a read-only file that already holds the value the kubelet wants, so it finds
# nothing to change. vm.overcommit_memory=1, vm.panic_on_oom=0, kernel.panic=10,
# kernel.panic_on_oops=1, kernel.keys.root_maxkeys, kernel.keys.root_maxbytes.
for kv in vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 kernel/panic_on_oops=1 \
	kernel/keys/root_maxkeys=1000000 kernel/keys/root_maxbytes=25000000; do
	key=${kv%=*} file="${data}/sysctl/${key//\//.}"
	echo "${kv#*=}" >"${file}"
	mount --bind -o ro "${file}" "/proc/sys/${key}"
done

# wait_for WHAT CMD...: retries CMD every 0.2 s until it succeeds; gives up after 120 s.
wait_for() {
	local what=$1 i
	shift
	for i in $(seq 600); do
		if "$@" >/dev/null 2>&1; then
			ts "${what}"
			return 0
		fi
		sleep 0.2
	done
	ts "gave up waiting: ${what}"
	return 1
}

# --- network. Only lo and fusebox0, with the node's address, at one end of a wire to
# the other node. On the first node fusebox0 is a bridge, and the wire a veth pair:
# fusebox-wire is a port of the bridge, and fusebox1 its other end; alone, the node
# keeps both. With a second node, hack/cluster.sh moves fusebox1 into that node's
# namespace, where it becomes the second node's fusebox0. The bridge holds the first
# node's address, the API server's, because a veth pair goes with either end's namespace:
# a second node that stops (its kube-proxy exits when its Node is deleted, and node.sh
# then stops the rest) takes the wire with it, and the first node keeps its address.
# The default route (which the kubelet and kube-proxy need to pick a node address)
# points at an address nobody has, so nothing leaves.
ip link set lo up
if [[ ${role} == control-plane ]]; then
	ip link add fusebox0 type bridge
	ip link add fusebox-wire type veth peer name fusebox1
	ip link set fusebox-wire master fusebox0
	ip link set fusebox-wire up
	ip link set fusebox1 up
else
	wait_for "link to the first node arrived" ip link show fusebox1
	ip link set fusebox1 name fusebox0
fi
ip addr add "${node_ip}/24" dev fusebox0
ip link set fusebox0 up
ip route add default via "${node_ip%.*}.1" dev fusebox0
# The other nodes' pod ranges, through those nodes; this node forwards its own pods'
# packets to them (and the CNI bridge would turn forwarding on with the first pod).
for route in "${routes[@]}"; do
	# shellcheck disable=SC2086 # "CIDR via ADDRESS"
	ip route add ${route} dev fusebox0
done
echo 1 >/proc/sys/net/ipv4/ip_forward
ts "network ready"

# --- components, in order of need. Each one's pid is kept to stop them in reverse.
pids=()
names=()
start() { # NAME CMD...
	local name=$1
	shift
	"$@" >"${logs}/${name}.log" 2>&1 &
	pids+=($!)
	names+=("${name}")
	ts "started ${name} (pid $!)"
}
stop() {
	trap - TERM INT
	ts "stopping"
	# The kubelet first, so it does not see its runtime or API server go and react.
	local i
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
		if [[ ${names[i]} == kubelet ]]; then kill -TERM "${pids[i]}" 2>/dev/null || true; fi
	done
	kill -TERM "${pids[@]}" 2>/dev/null || true
	# Their state is thrown away with the state directory, so a component that takes its
	# time (the API server draining its watches) is not waited for long.
	for i in $(seq 20); do
		kill -0 "${pids[@]}" 2>/dev/null || break
		sleep 0.1
	done
	ts "stopped"
	exit 0 # the kernel kills the rest of this PID namespace
}
trap stop TERM INT
admin() { kubectl --kubeconfig "${state}/kubeconfig" --cache-dir "${data}/kube-cache" "$@"; }
# What a kubelet may ask of the API server is enough to see that it is ready.
as_kubelet() { kubectl --kubeconfig "${kubelet_kubeconfig}" --cache-dir "${data}/kube-cache" "$@"; }

if [[ ${role} == control-plane ]]; then
	start etcd etcd --name "${node_name}" --data-dir "${data}/etcd" --unsafe-no-fsync \
		--listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
		--listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
		--initial-cluster "${node_name}=http://127.0.0.1:2380"
fi

start containerd containerd --config "${conf}/containerd.toml"

if [[ ${role} == control-plane ]]; then
	start kube-apiserver kube-apiserver --etcd-servers http://127.0.0.1:2379 \
		--advertise-address "${node_ip}" --secure-port 6443 \
		--tls-cert-file "${pki}/kube-apiserver.crt" --tls-private-key-file "${pki}/kube-apiserver.key" \
		--client-ca-file "${pki}/ca.crt" \
		--service-account-issuer https://kubernetes.default.svc.cluster.local \
		--service-account-key-file "${pki}/service-account.pub" \
		--service-account-signing-key-file "${pki}/service-account.key" \
		--service-cluster-ip-range "${service_cidr}" \
		--authorization-mode Node,RBAC --allow-privileged \
		--kubelet-client-certificate "${pki}/kube-apiserver-kubelet-client.crt" \
		--kubelet-client-key "${pki}/kube-apiserver-kubelet-client.key" \
		--kubelet-certificate-authority "${pki}/ca.crt" \
		--kubelet-preferred-address-types InternalIP \
		--profiling=false
fi

# The sandbox image must be there before the kubelet asks for its first pod.
wait_for "containerd ready" ctr --address /run/containerd/containerd.sock version
ctr --address /run/containerd/containerd.sock -n k8s.io images import \
	--platform "linux/${goarch}" "${pause_tar}" >"${logs}/pause-import.log" 2>&1
ts "imported ${pause_image}"

if [[ ${role} == control-plane ]]; then
	wait_for "kube-apiserver ready" admin get --raw /readyz
	start kube-controller-manager kube-controller-manager \
		--kubeconfig "${state}/kube-controller-manager.kubeconfig" \
		--authentication-kubeconfig "${state}/kube-controller-manager.kubeconfig" \
		--authorization-kubeconfig "${state}/kube-controller-manager.kubeconfig" \
		--bind-address 127.0.0.1 --leader-elect=false \
		--use-service-account-credentials \
		--service-account-private-key-file "${pki}/service-account.key" --root-ca-file "${pki}/ca.crt" \
		--cluster-signing-cert-file "${pki}/ca.crt" --cluster-signing-key-file "${pki}/ca.key" \
		--service-cluster-ip-range "${service_cidr}" --profiling=false \
		--flex-volume-plugin-dir "${data}/volume-plugins"
	start kube-scheduler kube-scheduler \
		--kubeconfig "${state}/kube-scheduler.kubeconfig" \
		--authentication-kubeconfig "${state}/kube-scheduler.kubeconfig" \
		--authorization-kubeconfig "${state}/kube-scheduler.kubeconfig" \
		--bind-address 127.0.0.1 --leader-elect=false --profiling=false
else
	# Through the link: the API server is on the first node. Started before it is ready,
	# the kubelet would back off its registration by up to 7 s.
	wait_for "kube-apiserver on ${api_server_ip} ready" as_kubelet get --raw /readyz
fi
start kube-proxy kube-proxy --config "${conf}/kube-proxy.yaml"
start kubelet kubelet --config "${conf}/kubelet.yaml" \
	--kubeconfig "${kubelet_kubeconfig}" --root-dir "${data}/kubelet" \
	--node-ip "${node_ip}" --hostname-override "${node_name}"

ts "all started"
# A component that exits is a broken node: stop the rest rather than limp on.
while true; do
	sleep 1 &
	wait $! || true
	for i in "${!pids[@]}"; do
		if ! kill -0 "${pids[i]}" 2>/dev/null; then
			ts "${names[i]} exited (log: ${logs}/${names[i]}.log)"
			stop
		fi
	done
done
