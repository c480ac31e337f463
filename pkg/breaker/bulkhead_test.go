package breaker

import (
	"context"
	"errors"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker/internal/fakeclock"
	"github.com/fusebox-dev/fusebox/pkg/breaker/observe"
)

// limitedBreaker is a breaker on a fake clock with p; observed gives it the recorder as a
// CallObserver (every call through admitSlow), else only as an Observer (the lock-free
// paths).
func limitedBreaker(t *testing.T, p Policy, observed bool) (*Breaker, *fakeclock.Clock, *recorder) {
	t.Helper()
	clock := newFakeClock()
	rec := &recorder{}
	var obs observe.Observer = transitionsOnly{rec}
	if observed {
		obs = rec
	}
	b, err := New("test", p, WithClock(clock), WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	return b, clock, rec
}

func TestConcurrencyPolicyValidation(t *testing.T) {
	for _, tc := range []struct {
		p     Policy
		field string // "" for valid
	}{
		{Policy{MaxInFlight: 5, MaxWait: time.Second, Adaptive: &AdaptiveConcurrency{}}, ""},
		{Policy{MaxInFlight: 5, Adaptive: &AdaptiveConcurrency{Tolerance: 1, MinLimit: 9}}, ""},
		{Policy{MaxInFlight: 5, Adaptive: &AdaptiveConcurrency{Tolerance: 7}}, ""}, // above the CRD's 5: the operator's bound
		{Policy{MaxInFlight: -1}, "concurrency.maxInFlight"},
		{Policy{MaxWait: -time.Second}, "concurrency.maxWait"},
		{Policy{Adaptive: &AdaptiveConcurrency{Tolerance: 0.9}}, "concurrency.adaptive.tolerance"},
		{Policy{Adaptive: &AdaptiveConcurrency{Tolerance: -1}}, "concurrency.adaptive.tolerance"},
		{Policy{Adaptive: &AdaptiveConcurrency{Tolerance: math.NaN()}}, "concurrency.adaptive.tolerance"},
		{Policy{Adaptive: &AdaptiveConcurrency{Tolerance: math.Inf(1)}}, "concurrency.adaptive.tolerance"},
		{Policy{Adaptive: &AdaptiveConcurrency{MinLimit: -1}}, "concurrency.adaptive.minLimit"},
	} {
		err := tc.p.Validate()
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%+v: %v", tc.p, err)
		case tc.field != "" && (err == nil || !strings.Contains(err.Error(), "invalid "+tc.field+" ")):
			t.Errorf("%+v: %v, want an error naming %s", tc.p, err, tc.field)
		}
	}
	b, err := New("b", Policy{MaxInFlight: 3, Adaptive: &AdaptiveConcurrency{}})
	if err != nil {
		t.Fatal(err)
	}
	if a := b.Policy().Adaptive; a == nil || a.Tolerance != 1.5 || a.MinLimit != 1 {
		t.Errorf("zero AdaptiveConcurrency in force as %+v, want Tolerance 1.5, MinLimit 1", a)
	}
	// The policy returned is the caller's own: writing through it changes nothing.
	b.Policy().Adaptive.Tolerance = 4
	if b.Policy().Adaptive.Tolerance != 1.5 {
		t.Error("writing through Policy().Adaptive changed the breaker's policy")
	}
	if err := b.Update(Policy{MaxInFlight: 3, Adaptive: &AdaptiveConcurrency{Tolerance: 1.5, MinLimit: 1}}); err != nil || b.Policy().Adaptive.Tolerance != 1.5 {
		t.Errorf("Update with the same policy spelled out: %v", err)
	}
}

// Over the limit, Execute, Allow and Call are refused with ErrConcurrencyLimited, which is
// not ErrOpen, is not recorded, and never opens the circuit; a slot given back admits the
// next call. Both the lock-free paths and the observed one.
func TestConcurrencyLimitRefuses(t *testing.T) {
	for _, observed := range []bool{false, true} {
		p := testPolicy()
		p.MaxInFlight, p.MinimumThroughput = 2, 1
		b, _, rec := limitedBreaker(t, p, observed)
		d1, err1 := b.Allow()
		d2, err2 := b.Allow()
		if err1 != nil || err2 != nil {
			t.Fatalf("observed %v: two calls under a limit of 2 refused: %v, %v", observed, err1, err2)
		}
		ran := false
		for i := range 50 {
			var err error
			switch i % 3 {
			case 0:
				_, err = b.Allow()
			case 1:
				err = b.Execute(context.Background(), func(context.Context) error { ran = true; return nil })
			case 2:
				_, err = Call(context.Background(), b, Callbacks[int]{Closed: func(context.Context) (int, error) { ran = true; return 0, nil }})
			}
			if !errors.Is(err, ErrConcurrencyLimited) || errors.Is(err, ErrOpen) || errors.Is(err, ErrThrottled) {
				t.Fatalf("observed %v: call %d over the limit: %v", observed, i, err)
			}
			if !strings.Contains(err.Error(), `breaker "test": concurrency limit reached`) {
				t.Errorf("error text %q", err)
			}
		}
		if ran {
			t.Error("a refused call ran")
		}
		if b.State() != Closed || b.Counts().Calls != 0 {
			t.Errorf("observed %v: after 50 refusals: %v %+v, want closed with nothing recorded", observed, b.State(), b.Counts())
		}
		d1(nil)
		if err := b.Execute(context.Background(), func(context.Context) error { return nil }); err != nil {
			t.Errorf("observed %v: a slot given back did not admit: %v", observed, err)
		}
		d2(nil)
		tr := b.Traffic()
		if tr.Limit != 2 || tr.InFlightPeak != 2 || tr.Limited != 50 {
			t.Errorf("observed %v: Traffic %+v, want limit 2, peak 2, 50 limited", observed, tr)
		}
		if got := b.lim.inFlight(); got != 0 {
			t.Errorf("observed %v: %d calls in flight after all ended", observed, got)
		}
		if observed {
			rec.mu.Lock()
			limited := 0
			for _, ev := range rec.ends {
				if ev.Outcome == observe.OutcomeRejected && errors.Is(ev.Err, ErrConcurrencyLimited) && ev.Initial == Closed {
					limited++
				}
			}
			starts := rec.starts
			rec.mu.Unlock()
			if limited != 50 || starts != 3 {
				t.Errorf("observer saw %d limited refusals and %d starts, want 50 and 3", limited, starts)
			}
		}
	}
}

// Call runs the Open fallback for a refusal of the limit, with the refusal as its cause,
// and observers see it as a fallback for the concurrency limit.
func TestConcurrencyLimitFallback(t *testing.T) {
	p := testPolicy()
	p.MaxInFlight = 1
	b, _, rec := limitedBreaker(t, p, true)
	done, _ := b.Allow()
	defer done(nil)
	got, err := Call(context.Background(), b, Callbacks[string]{
		Closed: func(context.Context) (string, error) { return "closed", nil },
		Open: func(_ context.Context, cause error) (string, error) {
			if !errors.Is(cause, ErrConcurrencyLimited) {
				t.Errorf("fallback cause %v", cause)
			}
			return "fallback", nil
		},
	})
	if got != "fallback" || err != nil {
		t.Errorf("Call over the limit: %q, %v", got, err)
	}
	if rec.fallbacks[len(rec.fallbacks)-1] != "concurrency_limited" {
		t.Errorf("fallbacks %v", rec.fallbacks)
	}
}

// Probes take slots too; a probe the limit refuses takes no probe slot, so the half-open
// circuit is not wedged by it.
func TestConcurrencyLimitHalfOpen(t *testing.T) {
	p := testPolicy()
	p.MaxInFlight, p.HalfOpenPermittedCalls = 1, 2
	b, clock, _ := limitedBreaker(t, p, false)
	held, _ := b.Allow() // closed, holds the one slot
	b.Trip()
	clock.Advance(p.OpenTimeout)
	if _, err := b.Allow(); !errors.Is(err, ErrConcurrencyLimited) {
		t.Fatalf("a probe over the limit: %v", err)
	}
	held(nil) // stale: from the closed period
	for range 2 {
		done, err := b.Allow()
		if err != nil {
			t.Fatalf("a probe with a slot free: %v (probes in flight %d)", err, b.probesInFlight)
		}
		done(nil)
	}
	if b.State() != Closed {
		t.Errorf("two probe successes left the circuit %v", b.State())
	}
}

// A call waiting for a slot takes one given back; one whose context ends stops waiting
// with an error matching the context's too; one whose wait runs out is refused; one that
// finds the circuit open after its wait is refused by the circuit, and gives its slot back.
func TestConcurrencyLimitWait(t *testing.T) {
	for _, observed := range []bool{false, true} {
		p := testPolicy()
		p.MaxInFlight, p.MaxWait = 1, time.Hour
		b, _, _ := limitedBreaker(t, p, observed)
		fire := make(chan time.Time)
		b.lim.newTimer = func(time.Duration) (<-chan time.Time, func() bool) { return fire, func() bool { return true } }
		waiting := func() {
			for b.lim.waiters.Load() == 0 {
				time.Sleep(time.Millisecond) // polls for the waiter; time itself is not awaited
			}
		}

		done, _ := b.Allow()
		res := make(chan error)
		go func() { res <- b.Execute(context.Background(), func(context.Context) error { return nil }) }()
		waiting()
		done(nil)
		if err := <-res; err != nil {
			t.Errorf("observed %v: a waiter refused after a slot came free: %v", observed, err)
		}

		done, _ = b.Allow()
		ctx, cancel := context.WithCancel(context.Background())
		go func() { res <- b.Execute(ctx, func(context.Context) error { return nil }) }()
		waiting()
		cancel()
		if err := <-res; !errors.Is(err, ErrConcurrencyLimited) || !errors.Is(err, context.Canceled) || errors.Is(err, ErrOpen) {
			t.Errorf("observed %v: a waiter whose context ended: %v", observed, err)
		}

		go func() { _, err := b.Allow(); res <- err }()
		waiting()
		fire <- time.Time{}
		if err := <-res; !errors.Is(err, ErrConcurrencyLimited) || errors.Is(err, context.Canceled) {
			t.Errorf("observed %v: a waiter whose wait ran out: %v", observed, err)
		}

		go func() { res <- b.Execute(context.Background(), func(context.Context) error { return nil }) }()
		waiting()
		b.Trip()
		done(nil)
		if err := <-res; !errors.Is(err, ErrOpen) {
			t.Errorf("observed %v: a waiter that finds the circuit open: %v", observed, err)
		}
		if n := b.lim.inFlight(); n != 0 {
			t.Errorf("observed %v: %d slots taken after every call ended", observed, n)
		}
		if tr := b.Traffic(); tr.Limited != 2 {
			t.Errorf("observed %v: %d limited, want 2", observed, tr.Limited)
		}
	}
}

// A panic and runtime.Goexit in the protected function give the slot back.
func TestConcurrencyLimitPanicAndGoexit(t *testing.T) {
	p := testPolicy()
	p.MaxInFlight = 1
	b, _, _ := limitedBreaker(t, p, false)
	func() {
		defer func() { _ = recover() }()
		_ = b.Execute(context.Background(), func(context.Context) error { panic("boom") })
	}()
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		_ = b.Execute(context.Background(), func(context.Context) error { runtime.Goexit(); return nil })
	}()
	<-ch
	if n := b.lim.inFlight(); n != 0 {
		t.Errorf("%d slots taken after a panic and a Goexit", n)
	}
}

// Update moves the limit; calls admitted under an earlier policy give their slots back to
// the same counter, with the limit removed and set again in between.
func TestConcurrencyLimitUpdate(t *testing.T) {
	p := testPolicy()
	p.MaxInFlight = 2
	b, _, _ := limitedBreaker(t, p, false)
	d1, _ := b.Allow()
	d2, _ := b.Allow()
	p.MaxInFlight = 3
	_ = b.Update(p)
	d3, err := b.Allow()
	if err != nil {
		t.Fatalf("a raised limit refused: %v", err)
	}
	p.MaxInFlight = 0
	_ = b.Update(p)
	d4, err := b.Allow() // no limit: not counted
	if err != nil {
		t.Fatal(err)
	}
	p.MaxInFlight = 3
	_ = b.Update(p)
	if _, err := b.Allow(); !errors.Is(err, ErrConcurrencyLimited) {
		t.Errorf("3 in flight under a limit of 3: %v", err)
	}
	if tr := b.Traffic(); tr.Limit != 3 || tr.InFlightPeak != 3 {
		t.Errorf("Traffic %+v", tr)
	}
	for _, d := range []func(error){d1, d2, d3, d4} {
		d(nil)
	}
	if n := b.lim.inFlight(); n != 0 {
		t.Errorf("%d in flight after every call ended", n)
	}
}

// The peak and the limited calls are counted over the window's spans: the live one and the
// one before, then forgotten; the current calls in flight are always part of the peak.
func TestConcurrencyFiguresAgeOut(t *testing.T) {
	p := testPolicy()
	p.MaxInFlight = 3
	b, clock, _ := limitedBreaker(t, p, false)
	var dones []func(error)
	for range 3 {
		d, _ := b.Allow()
		dones = append(dones, d)
	}
	_, _ = b.Allow()
	for _, d := range dones[1:] {
		d(nil)
	}
	if tr := b.Traffic(); tr.InFlightPeak != 3 || tr.Limited != 1 {
		t.Fatalf("Traffic %+v", tr)
	}
	clock.Advance(p.Window)
	if tr := b.Traffic(); tr.InFlightPeak != 3 || tr.Limited != 1 {
		t.Errorf("a window later: %+v, want the span before still counted", tr)
	}
	clock.Advance(p.Window)
	if tr := b.Traffic(); tr.InFlightPeak != 1 || tr.Limited != 0 {
		t.Errorf("two windows later: %+v, want the peak of the one call still in flight", tr)
	}
	b.Trip()
	if tr := b.Traffic(); tr.Limit != 3 || tr.InFlightPeak != 1 || tr.Requests != 0 {
		t.Errorf("open: %+v, want the concurrency figures and no window", tr)
	}
	dones[0](nil)
}

// Retry does not retry a refusal of the limit, nor spend the budget on one.
func TestRetryStopsAtTheConcurrencyLimit(t *testing.T) {
	p := testPolicy()
	p.MaxInFlight = 1
	b, _, _ := limitedBreaker(t, p, false)
	done, _ := b.Allow()
	defer done(nil)
	calls := 0
	err := Retry(context.Background(), b, 3, func(context.Context) error { calls++; return errBoom }, WithBackoff(0, 0))
	if !errors.Is(err, ErrConcurrencyLimited) || calls != 0 {
		t.Errorf("Retry over the limit: %v after %d calls", err, calls)
	}
}

// The limit applies beside a retry budget or throttling, a candidate and slow-call timing,
// each on its own path: 1 slot, a second call refused, the slot given back.
func TestConcurrencyLimitOnEveryPath(t *testing.T) {
	cand := testPolicy()
	for name, mod := range map[string]func(*Policy){
		"budget":    func(p *Policy) { p.RetryBudget = &RetryBudget{Percent: 20} },
		"throttle":  func(p *Policy) { p.Throttle = &Throttle{K: 2} },
		"slow":      func(p *Policy) { p.SlowCallDuration = time.Second },
		"adaptive":  func(p *Policy) { p.Adaptive = &AdaptiveConcurrency{} },
		"candidate": func(*Policy) {},
	} {
		p := testPolicy()
		p.MaxInFlight = 1
		mod(&p)
		b, _, _ := limitedBreaker(t, p, false)
		if name == "candidate" {
			if err := b.SetCandidate(&cand); err != nil {
				t.Fatal(err)
			}
		}
		for range 3 {
			inner := errors.New("unset")
			err := b.Execute(context.Background(), func(context.Context) error {
				inner = b.Execute(context.Background(), func(context.Context) error { return nil })
				_, e := Call(context.Background(), b, Callbacks[int]{Closed: func(context.Context) (int, error) { return 0, nil }})
				if !errors.Is(e, ErrConcurrencyLimited) {
					t.Errorf("%s: Call inside a call: %v", name, e)
				}
				return nil
			})
			if err != nil || !errors.Is(inner, ErrConcurrencyLimited) {
				t.Errorf("%s: outer %v, inner %v", name, err, inner)
			}
		}
		if n := b.lim.inFlight(); n != 0 {
			t.Errorf("%s: %d in flight after every call ended", name, n)
		}
		if name == "candidate" {
			if st, _ := b.Candidate(); st.Enforced.Refused != 0 {
				t.Errorf("refusals of the limit counted as the enforced circuit's: %+v", st.Enforced)
			}
		}
	}
}
