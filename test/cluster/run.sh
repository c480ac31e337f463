#!/usr/bin/env bash
# make test-cluster: the end-to-end suite (this directory) on a real cluster of two nodes.
#
#   test/cluster/run.sh [--nodes N] [--build-only | --prebuilt]
#
#   1. build the suite's test binary, the kubectl plugin and the six images on this machine (Go modules
#      need the network, which the cluster's namespaces do not have): the manager's
#      (`make image`), a rebuild of it under another tag for `helm upgrade`, the
#      example's (`make image-example`), the fuseboxd sidecar's (as `make
#      image-fuseboxd`, for this platform), hack/fuseboxd-worker's, the client that
#      uses the sidecar's socket, and hack/cluster/netcheck's, a pod's view of the
#      network between the nodes; and the Argo Rollouts controller (hack/rollouts.sh);
#   2. snapshot the host, `hack/cluster.sh up --nodes N` (in the background while the
#      images of step 1 build, after the suite's binary), load the images (into every
#      node);
#   3. run the suite inside the first node's network namespace (`hack/cluster.sh exec`);
#   4. `hack/cluster.sh down`, also when a step fails, then compare the host with the
#      snapshot (the spec labelled host).
#
# --nodes (or CLUSTER_NODES) is 2 by default; with 1 the specs labelled two-nodes are
# left out and the rest run on a single node. --build-only stops after step 1, and
# --prebuilt skips it, taking what an earlier --build-only built. .ci/run runs the whole
# script beside `make test`, which must not rewrite a file the build reads (it does not:
# hack/sync-generated.sh).
#
# A cluster that is already running (`make cluster`) is used as it is and left running,
# if it has N nodes; the host comparison is then skipped, since there is no snapshot from
# before it started (and fails under CI, which never has one running).
#
# Environment: CLUSTER_TEST_FLAGS (extra flags for the suite, e.g. -ginkgo.focus=GC),
# CLUSTER_NODES, IMG, EXAMPLE_IMG and FUSEBOXD_IMG (the images' names, as for make
# image / image-example / image-fuseboxd).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "${root}"
out="${root}/bin/cluster-e2e"
mkdir -p "${out}"

nodes="${CLUSTER_NODES:-2}"
build=1 run=1
while (($#)); do
	case $1 in
	--nodes)
		(($# >= 2)) || { echo "test-cluster: --nodes needs a number" >&2; exit 2; }
		nodes=$2
		shift 2
		;;
	--nodes=*) nodes=${1#--nodes=} && shift ;;
	--build-only) run=0 && shift ;;
	--prebuilt) build=0 && shift ;;
	*) echo "usage: test/cluster/run.sh [--nodes N] [--build-only | --prebuilt]" >&2 && exit 2 ;;
	esac
done
labels='!host'
[[ ${nodes} != 1 ]] || labels+=' && !two-nodes'

img="${IMG:-ghcr.io/fusebox-dev/fusebox:e2e}"
rebuilt="${img%:*}:e2e-rebuilt"
example="${EXAMPLE_IMG:-ghcr.io/fusebox-dev/fusebox-example:latest}"
# Not :latest, whose default pull policy (Always) would ask a registry: the pod webhook's
# sidecar names no pull policy of its own.
fuseboxd="${FUSEBOXD_IMG:-ghcr.io/fusebox-dev/fuseboxd:e2e}"
worker="ghcr.io/fusebox-dev/fuseboxd-worker:e2e"
netcheck="localhost/fusebox/netcheck:e2e"

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

# Every image for this machine's platform only: the nodes run nothing else, and the
# image test of make test-release builds and compares the release's platforms.
native="linux/$(go env GOARCH)"
if ((build)); then
	step "building the suite (test/cluster)"
	# Each module on its own, outside the workspace (go.work), as the Makefile builds them;
	# given to these commands alone, so that the suite runs with this script's caller's
	# environment.
	(cd test/cluster && GOWORK=off go test -c -o "${out}/cluster.test" .)
fi

# The cluster: one already running is used; else the host is snapshot and a new one
# started, which, when the images are still to be built, comes up while they build (most
# of its start is waiting on its nodes). up is that start, while it runs.
owned=0
baseline=""
up=""
if ((run)); then
	if hack/cluster.sh status 2>/dev/null | grep -q '^running'; then
		step "a cluster is running already: using it, and leaving it running"
		# It must have the nodes asked for: up says so, and does nothing else, if it has.
		hack/cluster.sh up --nodes "${nodes}" >/dev/null
	else
		baseline="${out}/host-before.json"
		"${out}/cluster.test" -host-snapshot "${baseline}"
		owned=1
		# A start still under way is let finish first, so that down finds what it started.
		trap 'step "stopping the cluster"; [[ -z ${up} ]] || wait "${up}" || true; hack/cluster.sh down || true' EXIT
		step "starting the cluster (${nodes} node(s))"
		if ((build)); then
			hack/cluster.sh up --nodes "${nodes}" >/dev/null &
			up=$!
		else
			hack/cluster.sh up --nodes "${nodes}" >/dev/null
		fi
	fi
fi

if ((build)); then
	step "building the images"
	# The kubectl plugin, as make plugin builds it, for the spec of `kubectl fusebox pods`.
	go build -o "${out}/kubectl-fusebox" ./cmd/kubectl-fusebox
	make --no-print-directory image IMG="${img}" PLATFORMS="${native}" >&2
	# A real rebuild, not a second name for the same image: another version label, so
	# another digest, as a new release would have.
	(cd hack/image && GOWORK=off go run . -root "${root}" -tag "${rebuilt}" -version e2e-rebuilt -platforms "${native}" \
		-layout "${out}/image-rebuilt" -archive "${out}/image-rebuilt.tar") >&2
	rm -rf "${out}/image-rebuilt"
	make --no-print-directory image-example EXAMPLE_IMG="${example}" PLATFORMS="${native}" >&2
	# The sidecar's and the worker's, as make image-fuseboxd builds the first.
	(cd hack/image && GOWORK=off go run . -root "${root}" -package ./cmd/fuseboxd -entrypoint /fuseboxd -title fuseboxd \
		-tag "${fuseboxd}" -platforms "${native}" -layout "${out}/image-fuseboxd" -archive "${out}/image-fuseboxd.tar") >&2
	(cd hack/image && GOWORK=off go run . -root "${root}" -package ./hack/fuseboxd-worker -entrypoint /fuseboxd-worker -title fuseboxd-worker \
		-tag "${worker}" -platforms "${native}" -layout "${out}/image-worker" -archive "${out}/image-worker.tar") >&2
	(cd hack/image && GOWORK=off go run . -root "${root}" -package ./hack/cluster/netcheck -entrypoint /netcheck -title netcheck \
		-tag "${netcheck}" -platforms "${native}" -layout "${out}/image-netcheck" -archive "${out}/image-netcheck.tar") >&2
	rm -rf "${out}/image-fuseboxd" "${out}/image-worker" "${out}/image-netcheck"
else
	step "using the suite and the images an earlier --build-only built"
fi
# The Argo Rollouts controller the rollout gate specs run (docs/rollouts.md): built from
# its Go module once, cached with the cluster's binaries.
rollouts="$(hack/rollouts.sh)"
if ((!run)); then
	step "built (--build-only)"
	exit 0
fi
if [[ -n ${up} ]]; then
	step "waiting for the cluster to be up"
	status=0
	wait "${up}" || status=$?
	up=""
	if ((status)); then
		step "hack/cluster.sh up failed (exit ${status})"
		exit "${status}"
	fi
fi
for tar in bin/image.tar "${out}/image-rebuilt.tar" bin/image-example.tar "${out}/image-fuseboxd.tar" "${out}/image-worker.tar" "${out}/image-netcheck.tar"; do
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
	-ginkgo.label-filter "${labels}" -ginkgo.v -ginkgo.no-color -ginkgo.timeout 50m \
	-root "${root}" -image "${img}" -rebuilt-image "${rebuilt}" -example-image "${example}" \
	-fuseboxd-image "${fuseboxd}" -worker-image "${worker}" -netcheck-image "${netcheck}" -rollouts "${rollouts}" \
	-plugin "${out}/kubectl-fusebox" -timings "${out}/timings.md" -host-baseline "${baseline}" -cluster-state "${state}" -nodes "${nodes}" \
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
	"${out}/cluster.test" -test.v -ginkgo.no-color -ginkgo.label-filter host -host-baseline "${baseline}" -cluster-state "${state}" -nodes "${nodes}" || rc=$?
elif [[ -n ${CI:-} ]]; then
	echo "test-cluster: a cluster was running before the suite, so the host could not be checked after it" >&2
	rc=1
fi
step "done (exit ${rc})"
exit "${rc}"
