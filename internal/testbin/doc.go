// Package testbin gives tests that run one of the repository's commands as a process
// (fuseboxd above all) the command's executable, built once for every suite that needs it.
//
// Each suite used to `go build -o` its own copy: the link alone of fuseboxd costs several
// seconds of CPU, and six suites of make test linked it in turn. `go run` keeps the
// executables it links in the build cache, keyed by what went into them, so Path asks
// `go run -exec echo` for the cached executable's path: the first suite links it, every
// later one (in this make test or the next, until a source file changes) finds it there.
package testbin
