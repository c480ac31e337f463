# Sourced by the scripts of hack/ that build large Go programs (the control plane, kubectl):
# go build prints nothing until it is done, which for kube-apiserver on two cores is many
# minutes; these say what is being built and how far along it is.

# go_build_progress LABEL OUTPUT PACKAGE [GO BUILD FLAGS...]
# Runs `go build -v FLAGS -o OUTPUT PACKAGE` in the current directory and prints to stderr,
# every PROGRESS_EVERY seconds (default 15), how many packages it has compiled of the
# PACKAGE's dependencies (`go list -deps`); packages found in the build cache are not
# compiled, so a warm build ends below the total.
go_build_progress() {
	local label="$1" out="$2" pkg="$3"
	shift 3
	local every="${PROGRESS_EVERY:-15}" total log pid start next compiled=0
	echo "${label}: listing the packages of ${pkg}" >&2
	total="$(go list -deps "${pkg}" | wc -l)"
	log="$(mktemp)"
	start=${SECONDS}
	next=$((start + every))
	echo "${label}: compiling ${total} packages (those in the build cache are skipped)" >&2
	go build -v "$@" -o "${out}" "${pkg}" 2>"${log}" &
	pid=$!
	while kill -0 "${pid}" 2>/dev/null; do
		sleep 1
		if ((SECONDS >= next)); then
			# go build -v names each package as it compiles it; "go: ..." lines are the go command's own.
			compiled="$(grep -vc '^go: ' "${log}" || true)"
			echo "${label}: ${compiled} of ${total} packages compiled, $((SECONDS - start)) s" >&2
			next=$((SECONDS + every))
		fi
	done
	if ! wait "${pid}"; then
		cat "${log}" >&2
		rm -f "${log}"
		return 1
	fi
	compiled="$(grep -vc '^go: ' "${log}" || true)"
	rm -f "${log}"
	echo "${label}: built in $((SECONDS - start)) s (${compiled} of ${total} packages compiled, the rest from the build cache)" >&2
}

# modules_digest PACKAGE...: prints a short digest of the module versions the packages
# build from, in the current directory's build list: the name of a cache of binaries
# built from them, which a change of any of those versions invalidates.
modules_digest() {
	go list -deps -f '{{with .Module}}{{.Path}}@{{.Version}}{{with .Replace}}=>{{.Path}}@{{.Version}}{{end}}{{end}}' "$@" |
		sort -u | sha256sum | cut -c1-12
}
