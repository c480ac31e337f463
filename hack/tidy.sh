#!/usr/bin/env bash
# Runs `go mod tidy` in each module of the workspace (go.work), or in the module
# directories given as arguments. go mod tidy works on one module and ignores go.work,
# and a module requires its unpublished siblings at a version no proxy serves, so each
# module is tidied in a scratch copy of its go.mod in which that version of the other
# workspace modules is replaced by their directories; go.mod and go.sum are then written
# back without those replace directives. Once the siblings are tagged and required at
# their tags, plain `GOWORK=off go mod tidy` does the same.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

mapfile -t mods < <(go list -m -f '{{.Path}} {{.Dir}}')
if (($# == 0)); then
	set -- $(printf '%s\n' "${mods[@]}" | cut -d' ' -f2)
fi

root=github.com/fusebox-dev/fusebox
# Only this version is replaced: a sibling required at a tag is resolved like any module.
placeholder=v0.0.0-00010101000000-000000000000
status=0
tmp="$(mktemp -d)"
trap 'rm -rf "${tmp}"' EXIT
for dir in "$@"; do
	dir="$(cd "${dir}" && pwd)"
	self="$(cd "${dir}" && GOWORK=off go mod edit -print | awk '$1 == "module" {print $2; exit}')"
	cp "${dir}/go.mod" "${tmp}/go.mod"
	rm -f "${tmp}/go.sum"
	[[ -f "${dir}/go.sum" ]] && cp "${dir}/go.sum" "${tmp}/go.sum"
	replaced=()
	for m in "${mods[@]}"; do
		path="${m%% *}"
		[[ "${path}" == "${self}" ]] && continue
		go mod edit -replace="${path}@${placeholder}=${m#* }" "${tmp}/go.mod"
		replaced+=(-dropreplace="${path}@${placeholder}")
	done
	echo "go mod tidy: ${self}" >&2
	(cd "${dir}" && GOWORK=off go mod tidy -modfile="${tmp}/go.mod")
	go mod edit "${replaced[@]}" "${tmp}/go.mod"
	# Only the operator may require the operator: a library module whose tests import it
	# would hand it, and controller-runtime, to every importer (docs/development.md, "The workspace").
	if [[ "${self}" != "${root}" ]] && go mod edit -json "${tmp}/go.mod" | grep -qF "\"Path\": \"${root}\","; then
		echo "  not written: its tests import the operator module ${root}; move them to the root module" >&2
		status=1
		continue
	fi
	cp "${tmp}/go.mod" "${dir}/go.mod"
	if [[ -s "${tmp}/go.sum" ]]; then cp "${tmp}/go.sum" "${dir}/go.sum"; else rm -f "${dir}/go.sum"; fi
done
exit "${status}"
