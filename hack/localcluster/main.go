// Command localcluster is `make run` on a machine without a cluster: it starts
// a local control plane (envtest's kube-apiserver and etcd, built from source
// by hack/envtest.sh), installs the CRDs, applies config/samples, writes a
// kubeconfig for kubectl and runs the manager against it, with a simulated
// workload (internal/sampleapp) whose pods report on the samples, until
// interrupted; then it stops everything it started.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fusebox-dev/fusebox/internal/localcluster"
	"github.com/fusebox-dev/fusebox/internal/sampleapp"
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
	managerLog := flag.String("manager-log", "", "Where the manager logs (default: manager.log beside the kubeconfig; \"-\" for this terminal).")
	workload := flag.Bool("sample-workload", true, "Run the simulated workload: pods whose breakers call a local upstream that fails and recovers.")
	bin := flag.String("bin", "bin", "The directory of kubectl and kubectl-fusebox, for the commands printed at the end.")
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
	// Its own process group: Ctrl-C reaches this process only, which stops the manager
	// with one SIGTERM. A second signal (the terminal's SIGINT, then ours) makes a
	// controller-runtime manager exit at once with status 1.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if *managerLog != "-" {
		// In a file, so that what to try next stays the last thing on the screen.
		if *managerLog == "" {
			*managerLog = filepath.Join(filepath.Dir(cluster.Kubeconfig), "manager.log")
		}
		f, err := os.Create(*managerLog)
		if err != nil {
			return err
		}
		defer f.Close()
		cmd.Stdout, cmd.Stderr = f, f
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start manager: %w", err)
	}
	fmt.Fprintf(os.Stderr, "localcluster: manager running (log: %s)\n", *managerLog)

	// The samples go in once the manager serves its webhooks: the
	// CircuitBreaker validating webhook fails closed, so until then the API
	// server refuses them. The workload follows, so that its pods have
	// breakers to call from the start.
	go func() {
		if err := populate(ctx, cluster, *samples, *workload); err != nil {
			fmt.Fprintln(os.Stderr, "localcluster:", err)
		}
		fmt.Fprint(os.Stderr, tryNext(cluster.Kubeconfig, *bin, time.Since(started)))
	}()

	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		return fmt.Errorf("manager exited: %v (its log: %s)", err, *managerLog)
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

// populate applies the samples and starts the simulated workload, which runs until ctx
// is done.
func populate(ctx context.Context, cluster *localcluster.Cluster, samples string, workload bool) error {
	if samples != "" {
		cl, err := client.New(cluster.Config, client.Options{Scheme: runtime.NewScheme()})
		if err != nil {
			return fmt.Errorf("samples: %w", err)
		}
		var applied []string
		var applyErr error
		if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			applied, applyErr = localcluster.Apply(ctx, cl, samples)
			return applyErr == nil, nil
		}); err != nil {
			return fmt.Errorf("could not apply %s: %v", samples, applyErr)
		}
		fmt.Fprintf(os.Stderr, "localcluster: applied %s\n", strings.Join(applied, ", "))
	}
	if !workload {
		fmt.Fprintln(os.Stderr, "localcluster: no workload (--sample-workload=false): the breakers show no state until pods report")
		return nil
	}
	say := func(line string) {
		fmt.Fprintf(os.Stderr, "localcluster: %s %s\n", time.Now().Format(time.TimeOnly), line)
	}
	w, err := sampleapp.Start(ctx, sampleapp.Options{Config: cluster.Config, Say: say})
	if err != nil {
		return fmt.Errorf("sample workload: %w", err)
	}
	fmt.Fprintf(os.Stderr, "localcluster: started %s\n", w.Describe())
	return nil
}

// tryNext is the end of the start-up output: what to type next, with the kubectl and
// the plugin of bin/.
func tryNext(kubeconfig, bin string, upIn time.Duration) string {
	abs, err := filepath.Abs(bin)
	if err != nil {
		abs = bin
	}
	return fmt.Sprintf(`
localcluster: Fusebox is running (up in %s). Try, from another terminal:

    export KUBECONFIG=%s PATH=%s:$PATH
    kubectl get cb -w                  # state, open pods, reporting pods; the sample upstream fails every minute
    kubectl fusebox open payments-api --for 10m --reason "trying Fusebox"   # then: kubectl fusebox release payments-api
    kubectl fusebox dashboard          # the same, live in a browser

Ctrl-C stops the workload, the manager and the control plane.

`, upIn.Round(100*time.Millisecond), kubeconfig, abs)
}
