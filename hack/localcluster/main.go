// Command localcluster is `make run` on a machine without a cluster: it starts
// a local control plane (envtest's kube-apiserver and etcd, built from source
// by hack/envtest.sh), installs the CRDs, applies config/samples, writes a
// kubeconfig for kubectl and runs the manager against it until interrupted,
// then stops everything it started.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fusebox-dev/fusebox/internal/localcluster"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "localcluster:", err)
		os.Exit(1)
	}
}

func run() error {
	kubeconfig := flag.String("kubeconfig-out", "bin/local/kubeconfig", "Where to write the kubeconfig of the local control plane.")
	samples := flag.String("samples", "config/samples", "Directory of YAML objects to apply once the control plane is up (\"\" for none).")
	manager := flag.String("manager", "bin/manager", "The manager binary to run against the control plane.")
	flag.Parse()
	managerArgs := flag.Args()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	started := time.Now()
	cluster, err := localcluster.StartWithWebhooks(".", *kubeconfig)
	if err != nil {
		return err
	}
	defer func() {
		fmt.Fprintln(os.Stderr, "localcluster: stopping the control plane")
		if err := cluster.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "localcluster: stop:", err)
		}
	}()
	fmt.Fprintf(os.Stderr, "localcluster: control plane up in %s at %s\n", time.Since(started).Round(time.Millisecond), cluster.Config.Host)

	// Plain-HTTP metrics on :8080, for curl: a local run has no scraper
	// with a service account token. Arguments after -- come later and win.
	args := append([]string{"--metrics-secure=false"}, cluster.WebhookArgs()...)
	cmd := exec.Command(*manager, append(args, managerArgs...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+cluster.Kubeconfig)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start manager: %w", err)
	}
	fmt.Fprintf(os.Stderr, "\nlocalcluster: Fusebox is running. From another terminal:\n\n"+
		"    export KUBECONFIG=%s\n    kubectl get cb -A\n\nCtrl-C stops the manager and the control plane.\n\n", cluster.Kubeconfig)

	// The samples go in once the manager serves its webhooks: the
	// CircuitBreaker validating webhook fails closed, so until then the API
	// server refuses them.
	if *samples != "" {
		go func() {
			cl, err := client.New(cluster.Config, client.Options{Scheme: runtime.NewScheme()})
			if err != nil {
				fmt.Fprintln(os.Stderr, "localcluster: samples:", err)
				return
			}
			var applied []string
			var applyErr error
			if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
				applied, applyErr = localcluster.Apply(ctx, cl, *samples)
				return applyErr == nil, nil
			}); err != nil {
				fmt.Fprintf(os.Stderr, "localcluster: could not apply %s: %v\n", *samples, applyErr)
				return
			}
			fmt.Fprintf(os.Stderr, "localcluster: applied %v\n", applied)
		}()
	}

	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		return fmt.Errorf("manager exited: %v", err)
	case <-ctx.Done():
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				fmt.Fprintln(os.Stderr, "localcluster: manager:", err)
			}
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			fmt.Fprintln(os.Stderr, "localcluster: manager killed after 15 s:", <-exited)
		}
		return nil
	}
}
