// Command kubectl-fusebox is the kubectl plugin for Fusebox: with the binary
// on PATH, `kubectl fusebox status|open|close|release|watch|dashboard|gate|pods`
// shows and overrides CircuitBreakers and judges rollouts by them, taking every
// kubectl connection flag (--kubeconfig, --context, -n, -A, ...).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-logr/logr"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/fusebox-dev/fusebox/internal/plugin"
)

func main() {
	// The plugin speaks through its output and errors; controller-runtime's
	// client has nothing to log to a user, and would otherwise complain, after
	// 30 s of watch or dashboard, that no logger was set.
	ctrllog.SetLogger(logr.Discard())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	cmd := plugin.NewCommand(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	err := cmd.ExecuteContext(ctx)
	stop()
	// gate exits 0, 1 or 2 by its judgement, and 3 when it judged nothing.
	code, silent := plugin.ExitCode(err)
	if !silent {
		fmt.Fprintln(os.Stderr, "error:", err)
	}
	os.Exit(code)
}
