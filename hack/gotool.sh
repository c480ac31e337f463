#!/usr/bin/env bash
# hack/gotool.sh OUTPUT PACKAGE@VERSION: builds a Go command from its module at that
# version into OUTPUT, once: the Makefile names OUTPUT after the version in a cache shared
# by every checkout (like the envtest control plane, hack/envtest.sh), so a fresh clone
# links nothing it has built before, and a version bump builds the new one. A half-built
# binary never lands there: it is built beside OUTPUT and renamed into place.
set -euo pipefail
out=$1 pkg=$2
[[ -x ${out} ]] && exit 0
mkdir -p "$(dirname "${out}")"
tmp="$(mktemp -d "$(dirname "${out}")/.build.XXXXXX")"
trap 'rm -rf "${tmp}"' EXIT
echo "building ${pkg} into ${out}, once" >&2
GOBIN="${tmp}" GOWORK=off go install "${pkg}"
# The command is the one file go install wrote: its name is the package's last element,
# or the one before it for a major-version suffix (kustomize/v5 installs "kustomize").
built=("${tmp}"/*)
if ((${#built[@]} != 1)) || [[ ! -x ${built[0]} ]]; then
	echo "go install ${pkg} wrote ${built[*]}, want one command" >&2
	exit 1
fi
mv "${built[0]}" "${out}"
