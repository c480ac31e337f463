#!/usr/bin/env bash
# Builds kubectl from its Go module at the version of the local API server (the
# k8s.io/kubernetes version that hack/tools/go.mod pins, the one hack/envtest.sh builds
# kube-apiserver from), so that `make run`'s commands need no kubectl of the machine's,
# and no download but Go modules. Usage: hack/kubectl.sh OUTPUT (default bin/kubectl).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib/gobuild.sh
source "${here}/lib/gobuild.sh"
out="$(realpath -m "${1:-${here}/../bin/kubectl}")"
tools="${here}/tools"
# As in hack/envtest.sh: in the workspace (go.work), without cgo.
unset GOWORK
export CGO_ENABLED=0

k8s_version="$(cd "${tools}" && go list -m -f '{{.Version}}' k8s.io/kubernetes)"
k8s_version="${k8s_version#v}"
# `kubectl version` reads these; without them it reports v0.0.0 and warns of a skew.
pkg=k8s.io/component-base/version
ldflags="-s -w \
 -X ${pkg}.gitVersion=v${k8s_version} \
 -X ${pkg}.gitMajor=${k8s_version%%.*} \
 -X ${pkg}.gitMinor=$(echo "${k8s_version}" | cut -d. -f2) \
 -X ${pkg}.gitTreeState=clean \
 -X ${pkg}.buildDate=1970-01-01T00:00:00Z"

mkdir -p "$(dirname "${out}")"
cd "${tools}"
go_build_progress "kubectl v${k8s_version}" "${out}.tmp" k8s.io/kubernetes/cmd/kubectl -trimpath -ldflags "${ldflags}"
mv "${out}.tmp" "${out}"
echo "${out}"
