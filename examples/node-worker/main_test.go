package nodeworker

import (
	"os/exec"
	"testing"

	"github.com/fusebox-dev/fusebox/examples/internal/workerpool"
)

// TestWorkersShareOneBreaker runs eight Node workers against one fuseboxd and an
// upstream that is down, then recovers: the circuit opens for all of them after the
// failures one process would need, and closes for all of them after recovery.
func TestWorkersShareOneBreaker(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		workerpool.Skip(t, "node not found: apt-get install nodejs")
	}
	workerpool.Run(t, 8, func(upstream, socket, stop string) *exec.Cmd {
		// A patient client: a loaded machine must not make the healthy sidecar look hung.
		return exec.Command(node, "worker.mjs", "--breaker", workerpool.Breaker, "--upstream", upstream,
			"--socket", socket, "--timeout-ms", "10000", "--interval-ms", "10", "--stop-file", stop, "--max-calls", "100000")
	})
}
