#!/usr/bin/env bash
# Builds the cluster's binaries from Go modules, once, into a cache shared by
# every checkout (docs/cluster.md), and prints the directory that holds all of them:
#
#   kubelet, kube-controller-manager, kube-scheduler, kube-proxy, kubectl
#       from k8s.io/kubernetes at hack/tools/go.mod's version, in the repository's
#       workspace (go.work: the modules they share with the operator at one version), in
#       one `go build` (the commands share most of their packages, so one build compiles
#       each package once), into a directory named after that version and a digest of the
#       module versions they build from;
#   kube-apiserver, etcd
#       hack/envtest.sh's, linked in, not built twice;
#   containerd, containerd-shim-runc-v2, ctr
#       from github.com/containerd/containerd/v2 at CONTAINERD_VERSION (env.sh).
#
# A part whose binaries are all there is skipped. While compiling it prints how many of
# the packages to compile are done, so a cold build (tens of minutes on two cores) is
# never silent.
set -euo pipefail
# shellcheck source=env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
# shellcheck source=../lib/gobuild.sh
source "${repo_root}/hack/lib/gobuild.sh"
# Kubernetes in the workspace (go.work), containerd in its own module; none with cgo, as
# the images are built (hack/image), so that they share compiled packages.
unset GOWORK
export CGO_ENABLED=0

k8s_cmds=(kubelet kube-controller-manager kube-scheduler kube-proxy kubectl)
k8s_version="$(cd "${repo_root}/hack/tools" && go list -m -f '{{.Version}}' k8s.io/kubernetes)"
k8s_version="${k8s_version#v}"
k8s_digest="$(cd "${repo_root}/hack/tools" && modules_digest "${k8s_cmds[@]/#/k8s.io/kubernetes/cmd/}")"
k8s_bin="${assets_root}/${k8s_version}-${goos}-${goarch}-${k8s_digest}"
containerd_bin="${assets_root}/containerd-${CONTAINERD_VERSION#v}-${goos}-${goarch}"

containerd_cmds=(containerd containerd-shim-runc-v2 ctr)

# Half-built binaries never land in the cache: each build writes to a temporary
# directory first.
tmps=()
trap 'rm -rf "${tmps[@]}"' EXIT

have_all() { # dir name...
	local dir=$1 n
	shift
	for n in "$@"; do [[ -x "${dir}/${n}" ]] || return 1; done
}

# progress LABEL TOTAL CMD...: runs a `go build -v` or `go install -v` command, which
# names each package on stderr as it compiles it, and reports every 15 s how many of
# TOTAL packages that is (cached packages are not named, so TOTAL is an upper bound of
# the work; linking names nothing). Other output (compile errors) passes through.
progress() {
	local label=$1 total=$2 start rc=0
	shift 2
	start=$(date +%s)
	ts "${label}: compiling (up to ${total} packages)"
	"$@" 2>&1 | {
		local line compiled=0 last=${start}
		while true; do
			if IFS= read -r -t 15 line; then
				if [[ ${line} =~ ^[A-Za-z0-9._~/+-]+$ ]]; then
					compiled=$((compiled + 1))
				else
					printf '%s\n' "${line}" >&2
				fi
			elif (($? <= 128)); then
				break # end of output; above 128 is the 15 s timeout
			fi
			if (($(date +%s) - last >= 15)); then
				last=$(date +%s)
				ts "${label}: ${compiled} of at most ${total} packages compiled (the rest cached or to come), $((last - start))s"
			fi
		done
	} || rc=$?
	((rc == 0)) || { ts "${label}: build failed (exit ${rc})"; return "${rc}"; }
	ts "${label}: done in $(($(date +%s) - start))s"
}

# The version strings `kubectl version` and the API server's /version report; without
# them a source build says v0.0.0 (as in hack/envtest.sh).
version_ldflags() {
	local pkg=k8s.io/component-base/version
	echo "-s -w -X ${pkg}.gitVersion=v${k8s_version} -X ${pkg}.gitMajor=${k8s_version%%.*}" \
		"-X ${pkg}.gitMinor=$(echo "${k8s_version}" | cut -d. -f2) -X ${pkg}.gitTreeState=clean" \
		"-X ${pkg}.buildDate=1970-01-01T00:00:00Z"
}

build_k8s() {
	have_all "${k8s_bin}" "${k8s_cmds[@]}" && return 0
	mkdir -p "${k8s_bin}"
	local tmp pkgs=() c total
	tmp="$(mktemp -d "${k8s_bin}/.build.XXXXXX")"
	tmps+=("${tmp}")
	for c in "${k8s_cmds[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/${c}"); done
	cd "${repo_root}/hack/tools"
	total=$(go list -deps "${pkgs[@]}" | grep -c .)
	progress "kubernetes v${k8s_version} (${k8s_cmds[*]})" "${total}" \
		go build -v -trimpath -ldflags "$(version_ldflags)" -o "${tmp}/" "${pkgs[@]}"
	for c in "${k8s_cmds[@]}"; do mv "${tmp}/${c}" "${k8s_bin}/"; done
}

build_containerd() {
	have_all "${containerd_bin}" "${containerd_cmds[@]}" && return 0
	mkdir -p "${containerd_bin}"
	local tmp mod dir pkgs=() c total tags="no_btrfs no_devmapper no_zfs"
	tmp="$(mktemp -d "${containerd_bin}/.build.XXXXXX")"
	tmps+=("${tmp}")
	mod=github.com/containerd/containerd/v2
	for c in "${containerd_cmds[@]}"; do pkgs+=("${mod}/cmd/${c}@${CONTAINERD_VERSION}"); done
	# The packages to compile, listed in the module's own directory (go list takes no @version).
	dir="$(GOWORK=off go mod download -json "${mod}@${CONTAINERD_VERSION}" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')"
	total=$(cd "${dir}" && GOWORK=off GOFLAGS=-mod=mod go list -tags "${tags}" -deps "${containerd_cmds[@]/#/./cmd/}" | grep -c .)
	# The storage drivers that need cgo are left out; the node uses overlayfs.
	GOWORK=off GOBIN="${tmp}" progress "containerd ${CONTAINERD_VERSION}" "${total}" \
		go install -v -trimpath -tags "${tags}" \
		-ldflags "-s -w -X ${mod}/version.Version=${CONTAINERD_VERSION}" "${pkgs[@]}"
	for c in "${containerd_cmds[@]}"; do mv "${tmp}/${c}" "${containerd_bin}/"; done
}

build_containerd
build_k8s

# kube-apiserver and etcd: hack/envtest.sh's build (a no-op once it exists).
envtest_dir="$("${repo_root}/hack/envtest.sh")"
link() { [[ "$(readlink "$2")" == "$1" ]] || ln -sfn "$1" "$2"; }
for c in kube-apiserver etcd; do link "${envtest_dir}/${c}" "${k8s_bin}/${c}"; done
for c in "${containerd_cmds[@]}"; do link "${containerd_bin}/${c}" "${k8s_bin}/${c}"; done
have_all "${k8s_bin}" "${k8s_cmds[@]}" kube-apiserver etcd "${containerd_cmds[@]}"
echo "${k8s_bin}"
