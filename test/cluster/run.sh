#!/usr/bin/env bash
# make test-cluster: the end-to-end suite (this directory) on a real single-node cluster.
#
#   1. build the suite's test binary and the five images on this machine (Go modules
#      need the network, which the cluster's namespace does not have): the manager's
#      (`make image`), a rebuild of it under another tag for `helm upgrade`, the
#      example's (`make image-example`), the fuseboxd sidecar's (as `make
#      image-fuseboxd`, for this platform) and hack/fuseboxd-worker's, the client that
#      uses the sidecar's socket; and the Argo Rollouts controller (hack/rollouts.sh);
#   2. snapshot the host, `hack/cluster.sh up`, load the images;
#   3. run the suite inside the cluster's network namespace (`hack/cluster.sh exec`);
#   4. `hack/cluster.sh down`, also when a step fails, then compare the host with the
#      snapshot (the spec labelled host).
#
# A cluster that is already running (`make cluster`) is used as it is and left running;
# the host comparison is then skipped, since there is no snapshot from before it started
# (and fails under CI, which never has one running).
#
# Environment: CLUSTER_TEST_FLAGS (extra flags for the suite, e.g. -ginkgo.focus=GC),
# IMG, EXAMPLE_IMG and FUSEBOXD_IMG (the images' names, as for make image /
# image-example / image-fuseboxd).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "${root}"
out="${root}/bin/cluster-e2e"
mkdir -p "${out}"
export GOWORK=off

img="${IMG:-ghcr.io/fusebox-dev/fusebox:e2e}"
rebuilt="${img%:*}:e2e-rebuilt"
example="${EXAMPLE_IMG:-ghcr.io/fusebox-dev/fusebox-example:latest}"
# Not :latest, whose default pull policy (Always) would ask a registry: the pod webhook's
# sidecar names no pull policy of its own.
fuseboxd="${FUSEBOXD_IMG:-ghcr.io/fusebox-dev/fuseboxd:e2e}"
worker="ghcr.io/fusebox-dev/fuseboxd-worker:e2e"

t0=$(date +%s)
step() { echo "test-cluster [$(($(date +%s) - t0)) s] $*" >&2; }

# An interrupt or a kill of this script stops the suite and exits, and so runs the EXIT
# trap that stops the cluster, at once: bash runs a trap only after the foreground
# command ends, which for the suite could be most of an hour, so the suite runs in the
# background (below) and is stopped here. suite is its process group, while it runs.
suite=""
# shellcheck disable=SC2317 # run by the trap
interrupted() {
	trap - INT TERM HUP
	step "interrupted"
	if [[ -n ${suite} ]]; then
		kill -TERM -- "-${suite}" 2>/dev/null || true
		# Ginkgo reports and runs its cleanup on SIGTERM; it gets 10 s.
		for _ in $(seq 20); do
			kill -0 -- "-${suite}" 2>/dev/null || break
			sleep 0.5
		done
		kill -KILL -- "-${suite}" 2>/dev/null || true
	fi
	exit 130
}
trap interrupted INT TERM HUP

step "building the suite (test/cluster) and the images"
(cd test/cluster && go test -c -o "${out}/cluster.test" .)
make --no-print-directory image IMG="${img}" >&2
# A real rebuild, not a second name for the same image: another version label, so
# another digest, as a new release would have.
(cd hack/image && go run . -root "${root}" -tag "${rebuilt}" -version e2e-rebuilt -platforms "linux/$(go env GOARCH)" \
	-layout "${out}/image-rebuilt" -archive "${out}/image-rebuilt.tar") >&2
rm -rf "${out}/image-rebuilt"
make --no-print-directory image-example EXAMPLE_IMG="${example}" >&2
# The sidecar's and the worker's, as make image-fuseboxd builds the first, for this
# machine's platform only: the node runs nothing else, and each platform is a link.
native="linux/$(go env GOARCH)"
(cd hack/image && go run . -root "${root}" -package ./cmd/fuseboxd -entrypoint /fuseboxd -title fuseboxd \
	-tag "${fuseboxd}" -platforms "${native}" -layout "${out}/image-fuseboxd" -archive "${out}/image-fuseboxd.tar") >&2
(cd hack/image && go run . -root "${root}" -package ./hack/fuseboxd-worker -entrypoint /fuseboxd-worker -title fuseboxd-worker \
	-tag "${worker}" -platforms "${native}" -layout "${out}/image-worker" -archive "${out}/image-worker.tar") >&2
rm -rf "${out}/image-fuseboxd" "${out}/image-worker"
# The Argo Rollouts controller the rollout gate specs run (docs/rollouts.md): built from
# its Go module once, cached with the cluster's binaries.
rollouts="$(hack/rollouts.sh)"

owned=0
baseline=""
if hack/cluster.sh status 2>/dev/null | grep -q '^running'; then
	step "a cluster is running already: using it, and leaving it running"
else
	baseline="${out}/host-before.json"
	"${out}/cluster.test" -host-snapshot "${baseline}"
	owned=1
	trap 'step "stopping the cluster"; hack/cluster.sh down || true' EXIT
	step "starting the cluster"
	hack/cluster.sh up >/dev/null
fi
for tar in bin/image.tar "${out}/image-rebuilt.tar" bin/image-example.tar "${out}/image-fuseboxd.tar" "${out}/image-worker.tar"; do
	step "loading ${tar}"
	hack/cluster.sh load "${tar}" >/dev/null
done

state="$(cd "${FUSEBOX_CLUSTER_DIR:-${root}/bin/cluster}" && pwd)"
rm -f "${out}/timings.md"
step "running the suite in the cluster's network namespace"
rc=0
# In a process group of its own (setsid), so that interrupted stops all of it; the
# terminal's Ctrl-C reaches this script, which passes it on.
# shellcheck disable=SC2086 # CLUSTER_TEST_FLAGS is a list of flags
setsid hack/cluster.sh exec -- "${out}/cluster.test" -test.v -test.timeout 60m \
	-ginkgo.label-filter '!host' -ginkgo.v -ginkgo.no-color -ginkgo.timeout 50m \
	-root "${root}" -image "${img}" -rebuilt-image "${rebuilt}" -example-image "${example}" \
	-fuseboxd-image "${fuseboxd}" -worker-image "${worker}" -rollouts "${rollouts}" \
	-timings "${out}/timings.md" -host-baseline "${baseline}" -cluster-state "${state}" \
	${CLUSTER_TEST_FLAGS:-} &
suite=$!
wait "${suite}" || rc=$?
suite=""
[[ ! -f ${out}/timings.md ]] || cat "${out}/timings.md" >&2

if ((owned)); then
	step "stopping the cluster"
	trap - EXIT
	hack/cluster.sh down
	step "comparing the host with the snapshot from before the cluster started"
	"${out}/cluster.test" -test.v -ginkgo.no-color -ginkgo.label-filter host -host-baseline "${baseline}" -cluster-state "${state}" || rc=$?
elif [[ -n ${CI:-} ]]; then
	echo "test-cluster: a cluster was running before the suite, so the host could not be checked after it" >&2
	rc=1
fi
step "done (exit ${rc})"
exit "${rc}"
