#!/usr/bin/env bash
# Builds the envtest control plane (kube-apiserver and etcd) from Go modules and
# installs it where setup-envtest would, so envtest and `make run` need no
# downloaded binary. Prints the directory to use as KUBEBUILDER_ASSETS.
#
# Versions come from hack/tools/go.mod, in the repository's workspace (go.work):
# kube-apiserver from k8s.io/kubernetes (its staging modules replaced by their
# published releases), etcd from the go.etcd.io/etcd/server/v3 version that
# kubernetes requires, every module they share with the operator at the operator's
# version. The directory is named after the Kubernetes version and a digest of every
# module version the two binaries build from (hack/lib/gobuild.sh), so a change of any of
# them builds them again; the build is skipped when both binaries are installed.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib/gobuild.sh
source "${here}/lib/gobuild.sh"
tools="${here}/tools"
# A GOWORK from the caller's environment would build with another build list.
unset GOWORK
export CGO_ENABLED=0

k8s_version="$(cd "${tools}" && go list -m -f '{{.Version}}' k8s.io/kubernetes)"
k8s_version="${k8s_version#v}"
goos="$(go env GOOS)"
goarch="$(go env GOARCH)"
assets_root="${ENVTEST_ASSETS_ROOT:-${XDG_DATA_HOME:-${HOME}/.local/share}/kubebuilder-envtest/k8s}"
digest="$(cd "${tools}" && modules_digest k8s.io/kubernetes/cmd/kube-apiserver ./cmd/etcd)"
dir="${ENVTEST_ASSETS_DIR:-${assets_root}/${k8s_version}-${goos}-${goarch}-${digest}}"

if [[ -x "${dir}/kube-apiserver" && -x "${dir}/etcd" ]]; then
	echo "${dir}"
	exit 0
fi

mkdir -p "${dir}"
tmp="$(mktemp -d "${dir}/.build.XXXXXX")"
trap 'rm -rf "${tmp}"' EXIT

# `kubectl version` and discovery read these; without them the server reports v0.0.0.
pkg=k8s.io/component-base/version
ldflags="-s -w \
 -X ${pkg}.gitVersion=v${k8s_version} \
 -X ${pkg}.gitMajor=${k8s_version%%.*} \
 -X ${pkg}.gitMinor=$(echo "${k8s_version}" | cut -d. -f2) \
 -X ${pkg}.gitTreeState=clean \
 -X ${pkg}.buildDate=1970-01-01T00:00:00Z"

echo "building kube-apiserver v${k8s_version} and etcd from their Go modules into ${dir}, once (see the README for how long it takes)" >&2
(
	cd "${tools}"
	go_build_progress "kube-apiserver v${k8s_version}" "${tmp}/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver -trimpath -ldflags "${ldflags}"
	go_build_progress etcd "${tmp}/etcd" ./cmd/etcd -trimpath -ldflags "-s -w"
)
mv "${tmp}/kube-apiserver" "${tmp}/etcd" "${dir}/"
echo "${dir}"
