package phpguzzle

import (
	"fmt"
	"os/exec"
	"testing"

	"github.com/fusebox-dev/fusebox/examples/internal/workerpool"
)

// TestWorkersShareOneBreaker runs eight php-cli workers, each with a Guzzle client
// through the breaker middleware, against one fuseboxd and an upstream that is down, then
// recovers: the circuit opens for all of them after the failures one process would need,
// and closes for all of them after recovery.
func TestWorkersShareOneBreaker(t *testing.T) {
	php, err := exec.LookPath("php")
	if err == nil {
		err = exec.Command(php, "-r", "exit(function_exists('curl_init') && stream_resolve_include_path('GuzzleHttp/autoload.php') ? 0 : 1);").Run()
	}
	if err != nil {
		workerpool.Skip(t, fmt.Sprintf("php with curl and Guzzle not available (%v): apt-get install php-cli php-curl php-guzzlehttp-guzzle", err))
	}
	workerpool.Run(t, 8, func(upstream, socket, stop string) *exec.Cmd {
		// A patient client: a loaded machine must not make the healthy sidecar look hung.
		return exec.Command(php, "worker.php", "--breaker", workerpool.Breaker, "--upstream", upstream,
			"--socket", socket, "--timeout-ms", "10000", "--interval-ms", "10", "--stop-file", stop, "--max-calls", "100000")
	})
}
