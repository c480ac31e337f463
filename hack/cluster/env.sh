# shellcheck shell=bash disable=SC2034 # the variables are for the scripts that source this
# Sourced by hack/cluster.sh and hack/cluster/*.sh: the versions, the cache of built
# binaries and the state directory of the single-node cluster (docs/cluster.md).

# containerd is built from its own Go module at this version (`go install`, so with the
# dependency versions containerd itself pins). Kubernetes' version comes from
# hack/tools/go.mod, the same as hack/envtest.sh's.
CONTAINERD_VERSION=v2.4.2

cluster_hack="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo_root="$(cd "${cluster_hack}/../.." && pwd)"
export GOWORK=off

goos="$(go env GOOS)"
goarch="$(go env GOARCH)"

# Built binaries, shared by every checkout, like the envtest control plane
# (build.sh: one directory per version and platform).
assets_root="${CLUSTER_ASSETS_ROOT:-${XDG_DATA_HOME:-${HOME}/.local/share}/fusebox-cluster}"

# Everything a running cluster writes lives here (bin/ is ignored by git).
state="${FUSEBOX_CLUSTER_DIR:-${repo_root}/bin/cluster}"
mkdir -p "${state}"
state="$(cd "${state}" && pwd)"

# The node's addresses: all of them exist only inside the cluster's network namespace.
# 198.51.100.0/24 is TEST-NET-2 (RFC 5737), never routed on any real network.
node_ip=198.51.100.10
node_name=fusebox-node
pod_cidr=10.244.0.0/24
service_cidr=10.96.0.0/24
api_service_ip=10.96.0.1

pause_image=localhost/fusebox/pause:1

# The kubelet's cgroups (cgroupfs has no namespace here) go under a parent of this
# cluster's own, named after its state directory: two clusters on one machine (two
# checkouts) would otherwise share /kubepods, and a kubelet removes the pod cgroups it
# does not know, with their processes.
cgroup_root="fusebox-cluster-$(printf '%s' "${state}" | sha256sum | cut -c1-8)"

# ts prints a line on stderr with the seconds since the command started.
export cluster_t0="${cluster_t0:-$(date +%s%3N)}"
ts() {
	local ms=$(($(date +%s%3N) - cluster_t0))
	printf 'cluster [%d.%03ds] %s\n' $((ms / 1000)) $((ms % 1000)) "$*" >&2
}
