package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/testutil"
	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakertest"
	"github.com/fusebox-dev/fusebox/pkg/breaker/kube"
	"github.com/fusebox-dev/fusebox/pkg/breaker/observe"
)

// A dependency that answers slowly but successfully opens a circuit that judges slow
// calls, and the CircuitBreaker says so: state Open, the member's trigger and slow-call
// rate, and the Open condition and CircuitOpened Event naming the slow-call rate.
//
// The slow pod's breakers run on a fake clock that the slow upstream advances: a call
// takes exactly what the test says. On the real clock the breaker reads time from its
// coarse clock, which a loaded machine's scheduler can leave behind, and a call that
// slept 150 ms was once measured under the 100 ms threshold (docs/semantics.md,
// "Clocks"): a trade the library makes, not what this test is about.
func TestASlowCallTripShowsOnTheResourceWithItsReason(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	const slow = 100 * time.Millisecond
	cb := &resiliencev1alpha1.CircuitBreaker{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "search"},
		Spec: resiliencev1alpha1.CircuitBreakerSpec{
			OpenTimeout:         &metav1.Duration{Duration: time.Hour}, // stays open while the test looks
			MinimumThroughput:   ptr.To[int32](4),
			FailureRatePercent:  ptr.To[int32](100),
			SlowCallDuration:    &metav1.Duration{Duration: slow},
			SlowCallRatePercent: ptr.To[int32](75),
		},
	}
	if err := k8sClient.Create(context.Background(), cb); err != nil {
		t.Fatal(err)
	}
	clock := breakertest.NewClock(time.Now())
	apps := []*instance{
		startInstance(t, ns, "app-0", func(o *kube.Options) {
			o.BreakerOptions = append(o.BreakerOptions, breaker.WithClock(clock))
		}),
		startInstance(t, ns, "app-1", nil),
	}
	b := apps[0].breaker("search")
	apps[1].breaker("search")
	testutil.Eventually(t, wait, "the instance runs the published slow-call policy", func() error {
		if p := b.Policy(); p.SlowCallDuration != slow || p.SlowCallRatio != 0.75 {
			return fmt.Errorf("policy %+v", p)
		}
		return nil
	})

	// Four calls that succeed, each slower than slowCallDuration: 100% slow of 4 calls.
	upstream := breakertest.NewUpstream(clock)
	upstream.Slow(slow + 50*time.Millisecond)
	for i := range 4 {
		if err := b.Execute(context.Background(), upstream.Call); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if s := b.State(); s != breaker.Open {
		t.Fatalf("after 4 slow calls the breaker is %s, want open", s)
	}
	if c := b.Counts(); c.Slow != 4 || c.Failures != 0 {
		t.Errorf("counts %+v, want 4 slow calls and no failure", c)
	}

	testutil.Eventually(t, wait, "the resource is Open on the slow-call rate", func() error {
		cb, err := getBreaker(ns, "search")
		if err != nil {
			return err
		}
		if cb.Status.State != resiliencev1alpha1.StateOpen {
			return fmt.Errorf("state %q", cb.Status.State)
		}
		var m *resiliencev1alpha1.MemberStatus
		for i := range cb.Status.Members {
			if cb.Status.Members[i].Pod == apps[0].pod {
				m = &cb.Status.Members[i]
			}
		}
		switch {
		case m == nil:
			return fmt.Errorf("%s not listed", apps[0].pod)
		case m.Trigger != breakerconfig.TriggerSlowCallRate:
			return fmt.Errorf("member trigger %q, want SlowCallRate", m.Trigger)
		case m.SlowCallRatePercent == nil || *m.SlowCallRatePercent != 100 || m.Calls == nil || *m.Calls != 4:
			return fmt.Errorf("member slow-call rate %v of %v calls, want 100%% of 4", m.SlowCallRatePercent, m.Calls)
		case m.FailureRatePercent != nil && *m.FailureRatePercent != 0:
			return fmt.Errorf("member failure rate %d%%, want 0", *m.FailureRatePercent)
		}
		if err := hasCondition(cb, resiliencev1alpha1.ConditionOpen, metav1.ConditionTrue); err != nil {
			return err
		}
		want := "slow-call rate 100% of 4 calls (slow: 100ms or longer)"
		if msg := condition(cb, resiliencev1alpha1.ConditionOpen).Message; !strings.Contains(msg, want) || !strings.Contains(msg, apps[0].pod) {
			return fmt.Errorf("Open condition %q does not name the pod and %q", msg, want)
		}
		return nil
	})
	testutil.Eventually(t, wait, "the CircuitOpened Event says why", func() error {
		note, err := event(ns, "search", resiliencev1alpha1.EventCircuitOpened)
		if err == nil && !strings.Contains(note, "slow-call rate 100% of 4 calls") {
			err = fmt.Errorf("note %q does not give the slow-call rate", note)
		}
		return err
	})
	if s := apps[1].breaker("search").State(); s != breaker.Closed {
		t.Errorf("scope Pod: %s is %s; another pod's slow calls must not open it", apps[1].pod, s)
	}
}

// opens records the open periods a breaker entered, as its observer sees them.
type opens struct {
	mu   sync.Mutex
	seen []observe.Transition // guarded by mu
}

func (o *opens) OnTransition(t observe.Transition) {
	if t.To != breaker.Open {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.seen = append(o.seen, t)
}

// entered returns the k-th consecutive open period the breaker entered, if it did.
func (o *opens) entered(k int) (observe.Transition, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for i := len(o.seen) - 1; i >= 0; i-- {
		if o.seen[i].ConsecutiveOpens == k {
			return o.seen[i], true
		}
	}
	return observe.Transition{}, false
}

// A fleet whose probes keep failing backs off as one (docs/design.md §5.13): the k-th
// consecutive fleet open lasts min(openTimeout×2^(k-1), maxOpenTimeout) on every pod,
// whichever pod's probe failed, and the resource shows the period.
func TestAFleetBacksOffAsOne(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	cb := &resiliencev1alpha1.CircuitBreaker{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ledger"},
		Spec: resiliencev1alpha1.CircuitBreakerSpec{
			OpenTimeout:      &metav1.Duration{Duration: 2 * time.Second},
			MaxOpenTimeout:   &metav1.Duration{Duration: 5 * time.Second},
			SuccessThreshold: ptr.To[int32](1),
			Scope:            resiliencev1alpha1.ScopeFleet,
		},
	}
	if err := k8sClient.Create(context.Background(), cb); err != nil {
		t.Fatal(err)
	}
	var apps []*instance
	seen := map[string]*opens{}
	for i := range 3 {
		o := &opens{}
		a := startInstance(t, ns, fmt.Sprintf("app-%d", i), func(opts *kube.Options) {
			opts.BreakerOptions = append(opts.BreakerOptions, breaker.WithObserver(o))
		})
		a.breaker("ledger")
		apps, seen[a.pod] = append(apps, a), o
	}
	testutil.Eventually(t, wait, "every instance reports and runs the backoff", func() error {
		for _, a := range apps {
			if p := a.breaker("ledger").Policy(); p.MaxOpenTimeout != 5*time.Second {
				return fmt.Errorf("%s runs %+v", a.pod, p)
			}
		}
		cb, err := getBreaker(ns, "ledger")
		if err == nil && (cb.Status.MemberCounts == nil || cb.Status.MemberCounts.Reporting != 3) {
			err = fmt.Errorf("counts %+v", cb.Status.MemberCounts)
		}
		return err
	})

	// everyPodKept waits until every instance entered the fleet's k-th open period, started
	// at since and lasting period, and checks that the published verdict and the resource's
	// status said the same. The periods are short: an instance may be half-open again by
	// the time it is looked at, so what it entered is read from its observer, or, when it
	// adopted the period while still open (which no transition shows), from its verdict.
	everyPodKept := func(k int, period time.Duration, since time.Time) {
		t.Helper()
		testutil.Eventually(t, wait, fmt.Sprintf("open %d: every instance open for %s", k, period), func() error {
			for _, a := range apps {
				tr, ok := seen[a.pod].entered(k)
				if !ok {
					// Adopted while still open from the period before, the circuit takes
					// the verdict's period with no transition to observe: it holds it.
					v := a.breaker("ledger").Verdict()
					if v.State != breaker.Open || v.ConsecutiveOpens != k {
						return fmt.Errorf("%s has not entered open period %d: it holds %+v", a.pod, k, v)
					}
					tr.OpenTimeout, tr.At = v.OpenTimeout, v.Since
				}
				switch {
				case tr.OpenTimeout != period:
					return fmt.Errorf("%s entered open period %d for %s, want %s", a.pod, k, tr.OpenTimeout, period)
				case tr.At.Sub(since).Abs() > time.Millisecond:
					return fmt.Errorf("%s entered open period %d at %s, the fleet's began at %s", a.pod, k, tr.At, since)
				}
			}
			return nil
		})
	}
	// statusShows waits until the resource shows the k-th open period, while it lasts.
	statusShows := func(k int, period time.Duration) {
		t.Helper()
		testutil.Eventually(t, wait, fmt.Sprintf("open %d: the resource shows %s", k, period), func() error {
			cb, err := getBreaker(ns, "ledger")
			if err != nil {
				return err
			}
			if cb.Status.ConsecutiveOpens < int32(k) {
				return fmt.Errorf("status %s, %d consecutive opens, open for %v", cb.Status.State, cb.Status.ConsecutiveOpens, cb.Status.OpenTimeout)
			}
			if cb.Status.ConsecutiveOpens > int32(k) {
				return nil // the test moved on; a later step checks that one
			}
			if cb.Status.State != resiliencev1alpha1.StateOpen || cb.Status.OpenTimeout == nil || cb.Status.OpenTimeout.Duration != period {
				return fmt.Errorf("status %s, %d consecutive opens, open for %v", cb.Status.State, cb.Status.ConsecutiveOpens, cb.Status.OpenTimeout)
			}
			if k > 1 {
				want := fmt.Sprintf("Open for %s, the %s consecutive open", period, map[int]string{2: "2nd", 3: "3rd", 4: "4th"}[k])
				if msg := condition(cb, resiliencev1alpha1.ConditionOpen).Message; !strings.Contains(msg, want) {
					return fmt.Errorf("Open condition %q does not say %q", msg, want)
				}
			}
			return nil
		})
	}
	// failProbe waits for the instance's circuit to admit a probe and fails it; it returns
	// when the circuit re-opened, with the start of its new open period.
	down := errors.New("ledger down")
	failProbe := func(a *instance) time.Time {
		t.Helper()
		b := a.breaker("ledger")
		testutil.Eventually(t, 2*wait, a.pod+" admits a probe", func() error {
			if err := b.Execute(context.Background(), func(context.Context) error { return down }); !errors.Is(err, down) {
				return fmt.Errorf("call: %v", err)
			}
			return nil
		})
		v := b.Verdict()
		if v.State != breaker.Open {
			t.Fatalf("%s is %s after its probe failed", a.pod, v.State)
		}
		return v.Since
	}

	apps[0].breaker("ledger").Trip()
	tripped := apps[0].breaker("ledger").Verdict().Since
	everyPodKept(1, 2*time.Second, tripped)
	v, err := publishedVerdict(ns, "ledger")
	if err != nil || v == nil || v.ConsecutiveOpens < 1 {
		t.Fatalf("published verdict %+v, %v: want the open period of the trip or a later one", v, err)
	}
	// Each failed probe, on another pod each time, doubles the fleet's period up to the
	// maximum: 4s, then 5s (not 8s), then 5s again.
	for _, step := range []struct {
		k      int
		prober *instance
		period time.Duration
	}{{2, apps[1], 4 * time.Second}, {3, apps[2], 5 * time.Second}, {4, apps[0], 5 * time.Second}} {
		since := failProbe(step.prober)
		everyPodKept(step.k, step.period, since)
		statusShows(step.k, step.period)
		v, err := publishedVerdict(ns, "ledger")
		if err != nil || v == nil || v.State != breakerconfig.StateOpen || v.ConsecutiveOpens != step.k ||
			time.Duration(v.OpenTimeout) != step.period || !v.Since.Equal(breakerconfig.NewTime(since).Time) {
			t.Fatalf("open %d: published verdict %+v, %v; want Open since %s for %s", step.k, v, err, since, step.period)
		}
	}

	// A probe that succeeds closes the fleet, and the count starts again.
	probe(t, apps[1].breaker("ledger"))
	testutil.Eventually(t, wait, "every instance is closed and the status forgot the backoff", func() error {
		for _, a := range apps {
			if v := a.breaker("ledger").Verdict(); v.State != breaker.Closed || v.ConsecutiveOpens != 0 {
				return fmt.Errorf("%s holds %+v", a.pod, v)
			}
		}
		cb, err := getBreaker(ns, "ledger")
		if err == nil && (cb.Status.State != resiliencev1alpha1.StateClosed || cb.Status.ConsecutiveOpens != 0 || cb.Status.OpenTimeout != nil) {
			err = fmt.Errorf("status %s, %d consecutive opens, open for %v", cb.Status.State, cb.Status.ConsecutiveOpens, cb.Status.OpenTimeout)
		}
		return err
	})
}

func condition(cb *resiliencev1alpha1.CircuitBreaker, conditionType string) metav1.Condition {
	for _, c := range cb.Status.Conditions {
		if c.Type == conditionType {
			return c
		}
	}
	return metav1.Condition{}
}
