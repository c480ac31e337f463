#!/usr/bin/env bash
# hack/sync-generated.sh SRC DST [SRC DST...]: makes each file of directory SRC that
# differs from its namesake in DST (or is missing there) DST's, by an atomic rename, and
# leaves the rest of DST alone. The generators write into scratch directories and this
# copies what changed: a file that is already what the generators make is not touched,
# so a build or a test reading the tree meanwhile (.ci/run runs the cluster suite beside
# `make test`) never sees one half written, and nothing is rebuilt for a file rewritten
# unchanged.
set -euo pipefail
while (($# >= 2)); do
	src=$1 dst=$2
	shift 2
	[[ -d ${src} ]] || continue
	mkdir -p "${dst}"
	for f in "${src}"/*; do
		[[ -f ${f} ]] || continue
		target="${dst}/$(basename "${f}")"
		cmp -s "${f}" "${target}" && continue
		cp "${f}" "${target}.tmp.$$"
		mv -f "${target}.tmp.$$" "${target}"
		echo "generated: ${target}" >&2
	done
done
