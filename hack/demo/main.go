// Command demo is `make demo`: Fusebox end to end on a local control plane. It
// starts the control plane and the manager, creates a CircuitBreaker, a local
// upstream HTTP server that can be made to fail, and three app instances that
// call it through httpbreaker with breakers wired by kube.Start. A scripted
// scenario (healthy, failing, recovering; then the same with scope Fleet)
// prints every change of the CircuitBreaker's status as the API server shows
// it, and ends by itself.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/localcluster"
	"github.com/fusebox-dev/fusebox/pkg/breaker/httpbreaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/kube"
)

const (
	namespace = "default"
	name      = "payments-api"
	instances = 3
)

var start = time.Now()

func say(format string, args ...any) {
	fmt.Printf("[%5.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
}

func main() {
	err := run()
	if errors.Is(err, context.Canceled) {
		// Ctrl-C: everything was stopped on the way out, as asked.
		say("interrupted; control plane and manager stopped")
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run() error {
	kubeconfig := flag.String("kubeconfig-out", "bin/demo/kubeconfig", "Where to write the kubeconfig of the demo's control plane.")
	manager := flag.String("manager", "bin/manager", "The manager binary.")
	hold := flag.Bool("hold", false, "Keep everything running after the scenario, until Ctrl-C.")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	cluster, err := localcluster.Start(".", *kubeconfig)
	if err != nil {
		return err
	}
	defer func() {
		if err := cluster.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stop control plane:", err)
		}
	}()
	say("control plane up; watch live from another terminal:")
	fmt.Printf("\n    kubectl --kubeconfig %s get cb -w\n\n", cluster.Kubeconfig)

	logPath := filepath.Join(filepath.Dir(cluster.Kubeconfig), "manager.log")
	stopManager, err := startManager(*manager, cluster.Kubeconfig, logPath)
	if err != nil {
		return err
	}
	defer stopManager()
	say("manager running (log: %s)", logPath)

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(resiliencev1alpha1.AddToScheme(scheme))
	cl, err := client.New(cluster.Config, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}

	cb := &resiliencev1alpha1.CircuitBreaker{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: resiliencev1alpha1.CircuitBreakerSpec{
			OpenTimeout:            &metav1.Duration{Duration: 4 * time.Second},
			Window:                 &metav1.Duration{Duration: 2 * time.Second},
			FailureRatePercent:     ptr.To[int32](50),
			MinimumThroughput:      ptr.To[int32](10),
			SuccessThreshold:       ptr.To[int32](2),
			HalfOpenPermittedCalls: ptr.To[int32](1),
			Scope:                  resiliencev1alpha1.ScopePod,
		},
	}
	if err := cl.Create(ctx, cb); err != nil {
		return fmt.Errorf("create CircuitBreaker: %w", err)
	}
	say("created CircuitBreaker %s: open at 50%% failures of at least 10 calls in a 2-4s window, probe after 4s", name)

	up := newUpstream()
	defer up.Close()

	// The app instances: each a "pod" with its own breaker registry, reporting in
	// its own BreakerReport. The Pod objects exist because a report is owned by its
	// Pod, and the operator deletes the reports of Pods that do not exist; each
	// instance is given its Pod's UID, as the injection webhook's POD_UID gives it.
	quiet := slog.New(slog.DiscardHandler)
	var wg sync.WaitGroup
	appCtx, stopApps := context.WithCancel(ctx)
	defer func() { stopApps(); wg.Wait() }()
	for i := range instances {
		pod := fmt.Sprintf("app-%d", i)
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: pod},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
		}
		if err := cl.Create(ctx, p); err != nil {
			return fmt.Errorf("create pod %s: %w", pod, err)
		}
		reg, err := kube.Start(appCtx, kube.Options{Config: cluster.Config, Namespace: namespace, Pod: pod, PodUID: string(p.UID), Logger: quiet})
		if err != nil {
			return fmt.Errorf("start instance %s: %w", pod, err)
		}
		httpc := &http.Client{Transport: httpbreaker.NewTransport(reg.Get(name), http.DefaultTransport), Timeout: time.Second}
		wg.Add(1)
		go func() {
			defer wg.Done()
			callLoop(appCtx, httpc, up.URL, pod)
		}()
	}
	say("3 app instances calling the upstream every 20ms through httpbreaker")

	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	states := make(chan resiliencev1alpha1.State, 64)
	go watch(watchCtx, cl, states)

	steps := []struct {
		banner string
		do     func() error
		until  resiliencev1alpha1.State
		within time.Duration
	}{
		{"== scope Pod: healthy", func() error { time.Sleep(3 * time.Second); return nil }, resiliencev1alpha1.StateClosed, 15 * time.Second},
		{"== upstream fails for app-0 and app-1", func() error { up.fail("app-0", "app-1"); return nil }, resiliencev1alpha1.StateOpen, 10 * time.Second},
		{"== upstream recovers: pods probe after 4s and close", func() error { up.fail(); return nil }, resiliencev1alpha1.StateClosed, 15 * time.Second},
		{"== scope Fleet: one pod that opens opens all", func() error {
			if err := setScope(ctx, cl, resiliencev1alpha1.ScopeFleet); err != nil {
				return err
			}
			time.Sleep(2 * time.Second)
			return nil
		}, resiliencev1alpha1.StateClosed, 5 * time.Second},
		{"== upstream fails for app-2 only", func() error { up.fail("app-2"); return nil }, resiliencev1alpha1.StateOpen, 10 * time.Second},
		{"== upstream recovers: the first pod to close closes the fleet", func() error { up.fail(); return nil }, resiliencev1alpha1.StateClosed, 15 * time.Second},
	}
	for _, s := range steps {
		say("%s", s.banner)
		if err := s.do(); err != nil {
			return err
		}
		if err := waitFor(ctx, states, s.until, s.within); err != nil {
			return err
		}
		if s.banner == "== upstream fails for app-2 only" {
			if err := waitForAllOpen(ctx, cl, 5*time.Second); err != nil {
				return err
			}
		}
	}
	say("scenario complete")
	if *hold {
		say("holding; Ctrl-C stops everything")
		<-ctx.Done()
	}
	return nil
}

// upstream is a local HTTP server that fails (500) for the instances named in
// its failing set.
type upstream struct {
	*httptest.Server
	failing atomic.Pointer[map[string]bool]
}

func newUpstream() *upstream {
	u := &upstream{}
	u.fail()
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if (*u.failing.Load())[r.Header.Get("X-Instance")] {
			http.Error(w, "upstream is failing", http.StatusInternalServerError)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	return u
}

func (u *upstream) fail(instances ...string) {
	m := map[string]bool{}
	for _, i := range instances {
		m[i] = true
	}
	u.failing.Store(&m)
}

func callLoop(ctx context.Context, c *http.Client, url, pod string) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		req.Header.Set("X-Instance", pod)
		if resp, err := c.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
	}
}

// watch prints every change of the CircuitBreaker's state or member counts, as
// the API server has them, and passes the state on.
func watch(ctx context.Context, cl client.Client, states chan<- resiliencev1alpha1.State) {
	var last string
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		var cb resiliencev1alpha1.CircuitBreaker
		if err := cl.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &cb); err != nil {
			continue
		}
		line := describe(&cb)
		if line != last {
			last = line
			say("   %s", line)
		}
		select {
		case states <- cb.Status.State:
		default:
		}
	}
}

func describe(cb *resiliencev1alpha1.CircuitBreaker) string {
	state := string(cb.Status.State)
	if state == "" {
		state = "(no reports)"
	}
	var pods []string
	for _, m := range cb.Status.Members {
		pods = append(pods, fmt.Sprintf("%s=%s", m.Pod, m.State))
	}
	var open string
	for _, c := range cb.Status.Conditions {
		if c.Type == resiliencev1alpha1.ConditionOpen && c.Status == metav1.ConditionTrue {
			open = " | " + c.Message
		}
	}
	return fmt.Sprintf("%s scope=%s state=%-8s %s%s", cb.Name, cb.Spec.Scope, state, strings.Join(pods, " "), open)
}

func waitFor(ctx context.Context, states <-chan resiliencev1alpha1.State, want resiliencev1alpha1.State, within time.Duration) error {
	deadline := time.After(within)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			return fmt.Errorf("the CircuitBreaker did not reach %s within %s", want, within)
		case s := <-states:
			if s == want {
				return nil
			}
		}
	}
}

func waitForAllOpen(ctx context.Context, cl client.Client, within time.Duration) error {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		var cb resiliencev1alpha1.CircuitBreaker
		if err := cl.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &cb); err == nil &&
			cb.Status.MemberCounts != nil && cb.Status.MemberCounts.Open == instances {
			say("   every pod is open: the fleet verdict reached them all")
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("not every pod opened within %s", within)
}

func setScope(ctx context.Context, cl client.Client, scope resiliencev1alpha1.Scope) error {
	var cb resiliencev1alpha1.CircuitBreaker
	if err := cl.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &cb); err != nil {
		return err
	}
	patch := client.MergeFrom(cb.DeepCopy())
	cb.Spec.Scope = scope
	return cl.Patch(ctx, &cb, patch)
}

func startManager(bin, kubeconfig, logPath string) (func(), error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--metrics-bind-address=0", "--health-probe-bind-address=0", "--leader-elect=false")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start manager: %w", err)
	}
	return func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
		}
		_ = logFile.Close()
	}, nil
}
