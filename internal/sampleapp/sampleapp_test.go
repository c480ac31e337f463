package sampleapp_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/localcluster"
	"github.com/fusebox-dev/fusebox/internal/sampleapp"
	"github.com/fusebox-dev/fusebox/internal/testenv"
	"github.com/fusebox-dev/fusebox/internal/testutil"
)

// TestSampleWorkload is what `make run` shows a newcomer, on a real API server with the
// operator's reconciler and admission policies: config/samples applied, then the sample
// workload on its default cycle. Within 30 s every sample breaker has the workload's
// pods reporting and a state (the ForcedOpen one Open on every pod); while the upstream
// fails for two of the three pods, payments-api (scope Pod) opens on those two only and
// inventory (scope Fleet, quorum 50%) on all three; both close again before the cycle's
// minute is over.
//
// The cycle runs on a clock of the test's, real time until the pods report and the
// breakers have their first states: then the test moves it to the end of the cycle's
// healthy part, which has nothing more to show (make run waits it out so that a newcomer
// can read what it printed). From the failure on, the cycle's time is real time again,
// against the samples' real open periods.
func TestSampleWorkload(t *testing.T) {
	ctrllog.SetLogger(logr.Discard())
	env, err := testenv.New("../..")
	if err != nil {
		t.Fatalf("envtest control plane (run `make envtest` or hack/envtest.sh): %v", err)
	}
	cfg, err := testenv.Start(env)
	if err != nil {
		t.Fatalf("start envtest: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	must(t, testenv.InstallPolicies(cfg, "../.."))

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(resiliencev1alpha1.AddToScheme(scheme))
	cl, err := client.New(cfg, client.Options{Scheme: scheme})
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	startOperator(ctx, t, cfg, scheme)

	applied, err := localcluster.Apply(ctx, cl, "../../config/samples")
	must(t, err)
	t.Logf("applied %v", applied)
	samples := []string{"inventory", "payments-api", "recommendations"}
	cycleClock := &skippingClock{}
	started := cycleClock.Now()

	var (
		mu   sync.Mutex
		said strings.Builder // what the workload said of its upstream, for a failure's message
	)
	upstream := func() string {
		mu.Lock()
		defer mu.Unlock()
		return said.String()
	}
	w, err := sampleapp.Start(ctx, sampleapp.Options{
		Config:     cfg,
		ClientRole: "../../config/rbac/breaker_client_role.yaml",
		Clock:      cycleClock,
		Say: func(line string) {
			mu.Lock()
			defer mu.Unlock()
			fmt.Fprintf(&said, "%5.1fs %s\n", cycleClock.Since(started).Seconds(), line)
		},
	})
	must(t, err)
	t.Log(w.Describe())

	// What each breaker's status went through, as polled.
	type seen struct {
		reporting, maxOpen int32
		states             []resiliencev1alpha1.State
	}
	history := map[string]*seen{}
	for _, name := range samples {
		history[name] = &seen{}
	}
	poll := func() {
		for _, name := range samples {
			var cb resiliencev1alpha1.CircuitBreaker
			if err := cl.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, &cb); err != nil {
				t.Fatal(err)
			}
			h := history[name]
			if mc := cb.Status.MemberCounts; mc != nil {
				h.reporting = mc.Reporting
				h.maxOpen = max(h.maxOpen, mc.Open)
			}
			if s := cb.Status.State; s != "" && (len(h.states) == 0 || h.states[len(h.states)-1] != s) {
				h.states = append(h.states, s)
				t.Logf("%5.1fs %s: %s (%d pods reporting)", cycleClock.Since(started).Seconds(), name, s, h.reporting)
			}
		}
	}
	summary := func() string {
		var b strings.Builder
		for _, name := range samples {
			h := history[name]
			fmt.Fprintf(&b, "\n  %s: states %v, %d pods reporting, at most %d open", name, h.states, h.reporting, h.maxOpen)
		}
		return b.String()
	}
	// waitUntil bounds each wait by the cycle's time since the start.
	waitUntil := func(within time.Duration, what string, done func() bool) {
		t.Helper()
		for {
			poll()
			if done() {
				t.Logf("%5.1fs %s", cycleClock.Since(started).Seconds(), what)
				return
			}
			if cycleClock.Since(started) > within {
				t.Fatalf("not within %v of the start on the cycle's clock: %s; history:%s\nupstream:\n%s", within, what, summary(), upstream())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	cycle := sampleapp.DefaultCycle

	waitUntil(30*time.Second, "every sample has 3 reporting pods and a state", func() bool {
		for _, name := range samples {
			if h := history[name]; h.reporting != 3 || len(h.states) == 0 {
				return false
			}
		}
		return true
	})
	if h := history["recommendations"]; h.states[0] != resiliencev1alpha1.StateOpen || h.maxOpen != 3 {
		t.Errorf("the ForcedOpen sample: states %v, at most %d pods open; want Open on all 3", h.states, h.maxOpen)
	}
	for _, name := range []string{"payments-api", "inventory"} {
		if s := history[name].states[0]; s != resiliencev1alpha1.StateClosed {
			t.Errorf("%s started %s, want Closed while the upstream is healthy", name, s)
		}
	}

	// Nothing changes until the upstream fails: on to the failure.
	if rest := cycle.Healthy - cycleClock.Since(started); rest > 0 {
		cycleClock.Skip(rest)
		t.Logf("%5.1fs moved the cycle on by %v, to its failure", cycleClock.Since(started).Seconds(), rest.Round(time.Millisecond))
	}

	opened := func(name string) bool { return slices.Contains(history[name].states, resiliencev1alpha1.StateOpen) }
	// Only a failing upstream opens them, and it fails again only at Period+Healthy: an
	// Open seen before then, however late a loaded machine shows it, is this failure's.
	waitUntil(cycle.Period+cycle.Healthy, "payments-api and inventory opened while the upstream failed", func() bool {
		return opened("payments-api") && opened("inventory") && history["inventory"].maxOpen == 3
	})
	closedAgain := func(name string) bool {
		s := history[name].states
		return opened(name) && s[len(s)-1] == resiliencev1alpha1.StateClosed
	}
	waitUntil(cycle.Period+cycle.Healthy, "both closed again before the upstream fails again", func() bool {
		return closedAgain("payments-api") && closedAgain("inventory")
	})
	if n := history["payments-api"].maxOpen; n != 2 {
		t.Errorf("payments-api (scope Pod) had at most %d pods open, want 2: the two the upstream failed", n)
	}

	cancel()
	select {
	case <-w.Done():
	case <-time.After(10 * time.Second):
		t.Error("the workload still runs 10 s after its context ended")
	}
}

// startOperator runs the operator's reconciler against cfg until ctx is done.
func startOperator(ctx context.Context, t *testing.T, cfg *rest.Config, scheme *runtime.Scheme) {
	t.Helper()
	stop, err := testutil.StartOperator(ctx, cfg, scheme)
	must(t, err)
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("manager: %v", err)
		}
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// skippingClock is real time, moved ahead by what Skip was given. Safe for concurrent use.
type skippingClock struct{ skipped atomic.Int64 }

var _ clock.PassiveClock = (*skippingClock)(nil)

func (c *skippingClock) Now() time.Time                  { return time.Now().Add(time.Duration(c.skipped.Load())) }
func (c *skippingClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// Skip moves the clock ahead by d.
func (c *skippingClock) Skip(d time.Duration) { c.skipped.Add(int64(d)) }
