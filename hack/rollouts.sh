#!/usr/bin/env bash
# Builds the Argo Rollouts controller from its Go module, once, into the cache the real
# cluster's binaries share (docs/cluster.md), and prints that directory:
#
#   rollouts-controller    github.com/argoproj/argo-rollouts/cmd/rollouts-controller at
#                          hack/rollouts/go.mod's version, built in that module (its
#                          replace directives are Argo Rollouts' own, which `go install
#                          ...@version` refuses to obey);
#   crds/                  the module's manifests/crds (Rollout, AnalysisTemplate,
#                          AnalysisRun, ClusterAnalysisTemplate, Experiment);
#   clusterrole.yaml       the module's manifests/role: what the controller may do.
#
# The end-to-end suite's rollout specs install the CRDs and run the controller as a
# process in the cluster's network namespace (docs/rollouts.md, "On a real cluster").
# The build is skipped when the directory is complete.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib/gobuild.sh
source "${here}/lib/gobuild.sh"
mod="${here}/rollouts"
export GOWORK=off

pkg=github.com/argoproj/argo-rollouts
version="$(cd "${mod}" && go list -m -f '{{.Version}}' "${pkg}")"
goos="$(go env GOOS)"
goarch="$(go env GOARCH)"
assets_root="${CLUSTER_ASSETS_ROOT:-${XDG_DATA_HOME:-${HOME}/.local/share}/fusebox-cluster}"
dir="${ROLLOUTS_ASSETS_DIR:-${assets_root}/argo-rollouts-${version#v}-${goos}-${goarch}}"

if [[ -x "${dir}/rollouts-controller" && -f "${dir}/clusterrole.yaml" && -f "${dir}/crds/rollout-crd.yaml" ]]; then
	echo "${dir}"
	exit 0
fi

mkdir -p "${dir}"
# Half-built files never land in the cache.
tmp="$(mktemp -d "${dir}/.build.XXXXXX")"
trap 'rm -rf "${tmp}"' EXIT

echo "building the Argo Rollouts controller ${version} from its Go module into ${dir}, once (docs/benchmarks.md, \"Argo Rollouts build\")" >&2
(
	cd "${mod}"
	export CGO_ENABLED=0
	# What `rollouts-controller --version` and its logs say; without them, 99.99.99.
	go_build_progress "rollouts-controller ${version}" "${tmp}/rollouts-controller" "${pkg}/cmd/rollouts-controller" \
		-trimpath -ldflags "-s -w -X ${pkg}/utils/version.version=${version} -X ${pkg}/utils/version.buildDate=1970-01-01T00:00:00Z -X ${pkg}/utils/version.gitTreeState=clean"
	src="$(go list -m -f '{{.Dir}}' "${pkg}")"
	mkdir -p "${tmp}/crds"
	cp "${src}"/manifests/crds/*-crd.yaml "${tmp}/crds/"
	cp "${src}/manifests/role/argo-rollouts-clusterrole.yaml" "${tmp}/clusterrole.yaml"
	chmod -R u+w "${tmp}" # the module cache is read-only, and so are copies of it
)
rm -rf "${dir}/crds"
mv "${tmp}/crds" "${tmp}/clusterrole.yaml" "${dir}/"
mv "${tmp}/rollouts-controller" "${dir}/"
echo "${dir}"
