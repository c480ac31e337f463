// Command localcluster is `make run`: Fusebox on a machine without a cluster. It starts
// a local control plane (envtest's kube-apiserver and etcd, built from source by
// hack/envtest.sh), installs the CRDs, the admission policies and the webhooks, writes a
// kubeconfig for kubectl and runs the manager against it, applies config/samples and
// starts the simulated workload of internal/sampleapp, whose pods report on the samples
// while its upstream fails and recovers; then it prints every change of the breakers'
// status until interrupted, and stops everything it started.
//
// One run per directory of its kubeconfig (internal/localcluster's ClaimDir): a second
// is refused, saying which one runs and how to reach it. Everything it starts listens on
// loopback only.
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
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
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
	narrated := flag.Bool("narrate", true, "Print every change of the breakers' status, as the API server has it, until interrupted.")
	flag.Parse()
	managerArgs := flag.Args()

	// Before anything is written: the kubeconfig and the manager's log of a run that
	// still goes on are its own.
	claim, err := localcluster.ClaimDir(filepath.Dir(*kubeconfig), *kubeconfig)
	if err != nil {
		return err
	}
	defer func() { _ = claim.Release() }()

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

	// Plain-HTTP metrics, for curl: a local run has no scraper with a service account
	// token. Arguments after -- come later and win.
	args, metrics, _, err := cluster.ManagerArgs()
	if err != nil {
		return err
	}
	args = append([]string{"--metrics-secure=false"}, args...)
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
		cl, err := populate(ctx, cluster, *samples, *workload)
		if err != nil {
			fmt.Fprintln(os.Stderr, "localcluster:", err)
			return
		}
		fmt.Fprint(os.Stderr, tryNext(cluster.Kubeconfig, *bin, metrics, time.Since(started)))
		if *narrated {
			fmt.Fprintln(os.Stderr, "localcluster: what the API server shows of the breakers, each change as it comes (state, each pod's, why):")
			narrate(ctx, cl, "default", os.Stderr)
		}
	}()

	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		return fmt.Errorf("the manager exited (%v): %s (its log: %s)", err, lastLine(*managerLog), *managerLog)
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
// is done, and returns a client of the cluster's API server.
func populate(ctx context.Context, cluster *localcluster.Cluster, samples string, workload bool) (client.Client, error) {
	scheme := runtime.NewScheme()
	utilruntime.Must(resiliencev1alpha1.AddToScheme(scheme))
	cl, err := client.New(cluster.Config, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	if samples != "" {
		var applied []string
		var applyErr error
		if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			applied, applyErr = localcluster.Apply(ctx, cl, samples)
			return applyErr == nil, nil
		}); err != nil {
			return nil, fmt.Errorf("could not apply %s: %v", samples, applyErr)
		}
		fmt.Fprintf(os.Stderr, "localcluster: applied %s\n", strings.Join(applied, ", "))
	}
	if !workload {
		fmt.Fprintln(os.Stderr, "localcluster: no workload (--sample-workload=false): the breakers show no state until pods report")
		return cl, nil
	}
	say := func(line string) {
		fmt.Fprintf(os.Stderr, "localcluster: %s %s\n", time.Now().Format(time.TimeOnly), line)
	}
	w, err := sampleapp.Start(ctx, sampleapp.Options{Config: cluster.Config, Say: say})
	if err != nil {
		return nil, fmt.Errorf("sample workload: %w", err)
	}
	fmt.Fprintf(os.Stderr, "localcluster: started %s\n", w.Describe())
	return cl, nil
}

// lastLine is the last line of the file at path that says something, for a manager that
// exited: the cause is its last word. "" if there is none.
func lastLine(path string) string {
	raw, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// tryNext is the end of the start-up output: what to type next, with the kubectl and
// the plugin of bin/.
func tryNext(kubeconfig, bin, metrics string, upIn time.Duration) string {
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
    curl -s http://%s/metrics | grep fusebox_   # the manager's metrics

Ctrl-C stops the workload, the manager and the control plane.

`, upIn.Round(100*time.Millisecond), kubeconfig, abs, metrics)
}
