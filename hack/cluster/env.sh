# shellcheck shell=bash disable=SC2034 # the variables are for the scripts that source this
# Sourced by hack/cluster.sh and hack/cluster/*.sh: the versions, the cache of built
# binaries, the state directory and the nodes of the cluster (docs/cluster.md).
#
# It exports nothing: `hack/cluster.sh exec` runs its command with the caller's
# environment, so a setting the scripts need for their own builds (GOWORK=off) is given
# to those commands alone.

# containerd is built from its own Go module at this version (`go install`, so with the
# dependency versions containerd itself pins). Kubernetes' version comes from
# hack/tools/go.mod, the same as hack/envtest.sh's.
CONTAINERD_VERSION=v2.4.2

cluster_hack="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo_root="$(cd "${cluster_hack}/../.." && pwd)"

goos="$(GOWORK=off go env GOOS)"
goarch="$(GOWORK=off go env GOARCH)"

# Built binaries, shared by every checkout, like the envtest control plane
# (build.sh: one directory per version and platform).
assets_root="${CLUSTER_ASSETS_ROOT:-${XDG_DATA_HOME:-${HOME}/.local/share}/fusebox-cluster}"

# Everything a running cluster writes lives here (bin/ is ignored by git).
state="${FUSEBOX_CLUSTER_DIR:-${repo_root}/bin/cluster}"
mkdir -p "${state}"
state="$(cd "${state}" && pwd)"

# The nodes, by index: the first runs the control plane as well, `up --nodes 2` adds the
# second. Their addresses exist only inside the network namespaces the script creates.
# 198.51.100.0/24 is TEST-NET-2 (RFC 5737), never routed on any real network. Each node
# has a pod range of its own; the other's is routed to it through the link between them.
node_names=(fusebox-node fusebox-node-2)
node_ips=(198.51.100.10 198.51.100.11)
node_pod_cidrs=(10.244.0.0/24 10.244.1.0/24)
max_nodes=${#node_names[@]}
# The API server's address is the first node's.
node_ip=${node_ips[0]}
node_name=${node_names[0]}
cluster_pod_cidr=10.244.0.0/16
service_cidr=10.96.0.0/24
api_service_ip=10.96.0.1

# Where node i keeps what is its own: the first node at the top of the state directory
# (etcd and the control plane's logs beside its own), each other node in a directory named
# after it, under conf/, data/ and logs/ (down removes conf/ and data/).
node_subdir() { (($1 == 0)) || echo "/${node_names[$1]}"; }
node_env_file() { echo "${state}/conf$(node_subdir "$1")/node.env"; }
node_pid_file() { (($1 == 0)) && echo "${state}/node.pid" || echo "${state}/node-$(($1 + 1)).pid"; }
node_unshare_file() { (($1 == 0)) && echo "${state}/unshare.pid" || echo "${state}/unshare-$(($1 + 1)).pid"; }

pause_image=localhost/fusebox/pause:1

# The kubelet's cgroups (cgroupfs has no namespace here) go under a parent of this
# cluster's own, named after its state directory: two clusters on one machine (two
# checkouts) would otherwise share /kubepods, and a kubelet removes the pod cgroups it
# does not know, with their processes. For the same reason each node after the first has
# a parent of its own inside that one (node_cgroup_root): the kubelets never see each
# other's pods, and whatever removes or finds the cluster's cgroups finds every node's.
cgroup_root="fusebox-cluster-$(printf '%s' "${state}" | sha256sum | cut -c1-8)"
node_cgroup_root() { echo "${cgroup_root}$(node_subdir "$1")"; }

# ts prints a line on stderr with the seconds since the command started (hack/cluster.sh
# up passes its start on to the scripts it runs).
cluster_t0="${cluster_t0:-$(date +%s%3N)}"
ts() {
	local ms=$(($(date +%s%3N) - cluster_t0))
	printf 'cluster [%d.%03ds] %s\n' $((ms / 1000)) $((ms % 1000)) "$*" >&2
}
