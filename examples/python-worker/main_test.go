package pythonworker

import (
	"os/exec"
	"testing"

	"github.com/fusebox-dev/fusebox/examples/internal/workerpool"
)

// TestWorkersShareOneBreaker runs eight Python workers against one fuseboxd and an
// upstream that is down, then recovers: the circuit opens for all of them after the
// failures one process would need, and closes for all of them after recovery.
func TestWorkersShareOneBreaker(t *testing.T) {
	python := lookPython(t)
	workerpool.Run(t, 8, func(upstream, socket, stop string) *exec.Cmd {
		// A patient client: a loaded machine must not make the healthy sidecar look hung.
		return exec.Command(python, "worker.py", "--breaker", workerpool.Breaker, "--upstream", upstream,
			"--socket", socket, "--timeout-ms", "10000", "--interval-ms", "10", "--stop-file", stop, "--max-calls", "100000")
	})
}

// lookPython is a python3 of at least 3.11, the client's floor.
func lookPython(t *testing.T) string {
	t.Helper()
	for _, candidate := range []string{"python3", "/usr/bin/python3"} {
		p, err := exec.LookPath(candidate)
		if err == nil && exec.Command(p, "-c", "import sys; sys.exit(sys.version_info < (3, 11))").Run() == nil {
			return p
		}
	}
	workerpool.Skip(t, "no python3 ≥ 3.11: apt-get install python3")
	return ""
}
