// Command kubectl-fusebox is the kubectl plugin for Fusebox: with the binary
// on PATH, `kubectl fusebox status|open|close|release|watch|dashboard` shows
// and overrides CircuitBreakers, taking every kubectl connection flag
// (--kubeconfig, --context, -n, -A, ...).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/fusebox-dev/fusebox/internal/plugin"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	cmd := plugin.NewCommand(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	err := cmd.ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
