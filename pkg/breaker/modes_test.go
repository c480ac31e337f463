package breaker

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/observe"
)

func TestModes(t *testing.T) {
	withMode := func(m Mode) Policy { p := testPolicy(); p.Mode = m; return p }
	t.Run("MetricsOnly computes the verdict but never short-circuits", func(t *testing.T) {
		b, clock, rec := newTestBreaker(t, withMode(ModeMetricsOnly))
		doN(t, b, 20, errBoom)
		wantState(t, b, Open)
		if tr := rec.takeTransitions(); len(tr) != 1 || tr[0].To != Open {
			t.Fatalf("transitions = %+v", tr)
		}
		// Calls Enforce would refuse run, and are not recorded.
		doN(t, b, 5, errBoom)
		doN(t, b, 5, nil)
		wantCounts(t, b, Counts{Calls: 20, Failures: 20})
		for _, e := range rec.ends[len(rec.ends)-10:] {
			if e.Outcome != observe.OutcomeIgnored || e.Initial != Open {
				t.Fatalf("call event %+v", e)
			}
		}
		clock.Advance(30 * time.Second)
		probe, err := b.Allow()
		if err != nil {
			t.Fatal(err)
		}
		doN(t, b, 3, errBoom) // over the cap: runs, not recorded
		wantState(t, b, HalfOpen)
		probe(nil)
		doN(t, b, 1, nil)
		wantState(t, b, Closed)
	})
	t.Run("ForcedOpen refuses everything and holds past the timeout", func(t *testing.T) {
		b, clock, rec := newTestBreaker(t, testPolicy())
		if err := b.Update(withMode(ModeForcedOpen)); err != nil {
			t.Fatal(err)
		}
		forcedAt := clock.Now()
		tr := rec.takeTransitions()
		if len(tr) != 1 || tr[0].To != Open || tr[0].Reason != breakerconfig.ReasonForced {
			t.Fatalf("transitions = %+v", tr)
		}
		clock.Advance(time.Hour)
		err := do(t, b, nil)
		if oe, ok := errors.AsType[*openError](err); !ok || oe.reason != rejectForcedOpen {
			t.Fatalf("got %v", err)
		}
		wantState(t, b, Open)
		b.Trip() // the mode wins
		if b.Adopt(Verdict{State: Closed, Since: clock.Now()}) {
			t.Fatal("Adopt changed a forced state")
		}
		if v := b.Verdict(); !v.Since.Equal(forcedAt) {
			t.Fatalf("open since %v, want %v", v.Since, forcedAt)
		}
		// Back in Enforce it is an ordinary open circuit that opened when it was forced.
		if err := b.Update(testPolicy()); err != nil {
			t.Fatal(err)
		}
		if len(rec.takeTransitions()) != 0 {
			t.Fatal("leaving ForcedOpen made a transition")
		}
		wantState(t, b, HalfOpen)
	})
	t.Run("ForcedOpen keeps an open period already running", func(t *testing.T) {
		b, clock, _ := newTestBreaker(t, testPolicy())
		opened := openIt(t, b, clock)
		clock.Advance(10 * time.Second)
		_ = b.Update(withMode(ModeForcedOpen))
		_ = b.Update(testPolicy())
		clock.Advance(20*time.Second - 1)
		wantState(t, b, Open)
		if v := b.Verdict(); !v.Since.Equal(opened) {
			t.Fatalf("since %v, want %v", v.Since, opened)
		}
		clock.Advance(1)
		wantState(t, b, HalfOpen)
	})
	t.Run("ForcedClosed never opens; back in Enforce the window stands", func(t *testing.T) {
		b, clock, _ := newTestBreaker(t, testPolicy())
		openIt(t, b, clock)
		_ = b.Update(withMode(ModeForcedClosed))
		wantState(t, b, Closed)
		wantCounts(t, b, Counts{}) // closing clears the window
		doN(t, b, 30, errBoom)
		wantState(t, b, Closed)
		wantCounts(t, b, Counts{Calls: 30, Failures: 30})
		b.Trip()
		wantState(t, b, Closed)
		_ = b.Update(testPolicy())
		wantState(t, b, Closed) // judged after the next failure
		doN(t, b, 1, errBoom)
		wantState(t, b, Open)
		wantCounts(t, b, Counts{Calls: 31, Failures: 31})
	})
	t.Run("Trip opens now and restarts an open period", func(t *testing.T) {
		b, clock, rec := newTestBreaker(t, testPolicy())
		doN(t, b, 3, errBoom)
		b.Trip()
		wantState(t, b, Open)
		wantCounts(t, b, Counts{Calls: 3, Failures: 3})
		clock.Advance(20 * time.Second)
		b.Trip() // restarts the open period, and is no transition
		tr := rec.takeTransitions()
		if len(tr) != 1 || tr[0].From != Closed || tr[0].To != Open || tr[0].Reason != breakerconfig.ReasonManual || tr[0].Period != 1 {
			t.Fatalf("transitions = %+v", tr)
		}
		if v := b.Verdict(); !v.Since.Equal(clock.Now()) || v.ConsecutiveOpens != 1 || v.OpenTimeout != 30*time.Second {
			t.Fatalf("verdict after a restart %+v, want open since now for 30s", v)
		}
		clock.Advance(20 * time.Second)
		wantState(t, b, Open)
		clock.Advance(10 * time.Second)
		wantState(t, b, HalfOpen)
	})
	t.Run("a forced mode at creation", func(t *testing.T) {
		b, _, _ := newTestBreaker(t, withMode(ModeForcedOpen))
		wantState(t, b, Open)
		if err := do(t, b, nil); !errors.Is(err, ErrOpen) {
			t.Fatalf("got %v", err)
		}
	})
}

func TestUpdate(t *testing.T) {
	t.Run("an open circuit stays open, timed from when it opened", func(t *testing.T) {
		b, clock, _ := newTestBreaker(t, testPolicy())
		openIt(t, b, clock)
		clock.Advance(10 * time.Second)
		p := testPolicy()
		p.OpenTimeout = 15 * time.Second
		if err := b.Update(p); err != nil {
			t.Fatal(err)
		}
		wantState(t, b, Open)
		wantCounts(t, b, Counts{Calls: 20, Failures: 20})
		clock.Advance(5 * time.Second)
		wantState(t, b, HalfOpen)
	})
	t.Run("the window keeps its tallies, which age out under the new width", func(t *testing.T) {
		b, clock, _ := newTestBreaker(t, testPolicy())
		doN(t, b, 7, errBoom)
		p := testPolicy()
		p.Window = time.Second
		_ = b.Update(p)
		wantCounts(t, b, Counts{Calls: 7, Failures: 7})
		clock.Advance(2 * time.Second)
		wantCounts(t, b, Counts{})
	})
	t.Run("an invalid policy is refused naming the field, and the old one stays", func(t *testing.T) {
		b, clock, _ := newTestBreaker(t, testPolicy())
		openIt(t, b, clock)
		p := testPolicy()
		p.Window = -time.Second
		err := b.Update(p)
		if fe, ok := errors.AsType[*fieldError](err); !ok || fe.Field != "window" {
			t.Fatalf("got %v", err)
		}
		if b.Policy() != testPolicy().withDefaults() {
			t.Fatalf("policy changed to %+v", b.Policy())
		}
		wantState(t, b, Open)
	})
	t.Run("probes in flight stay in flight when the cap shrinks", func(t *testing.T) {
		p := testPolicy()
		p.HalfOpenPermittedCalls = 3
		b, clock, _ := newTestBreaker(t, p)
		openIt(t, b, clock)
		clock.Advance(30 * time.Second)
		d1, _ := b.Allow()
		d2, _ := b.Allow()
		p.HalfOpenPermittedCalls = 1
		_ = b.Update(p)
		if err := do(t, b, nil); !errors.Is(err, ErrOpen) {
			t.Fatalf("third probe admitted over the new cap: %v", err)
		}
		d1(nil)
		d2(nil)
		wantState(t, b, Closed)
	})
}

func TestValidate(t *testing.T) {
	mod := func(f func(*Policy)) Policy { p := DefaultPolicy(); f(&p); return p }
	nan := 0.0
	nan /= nan
	tests := []struct {
		name  string
		p     Policy
		field string
	}{
		{"negative timeout", mod(func(p *Policy) { p.OpenTimeout = -1 }), "openTimeout"},
		{"negative window", mod(func(p *Policy) { p.Window = -time.Second }), "window"},
		{"negative ratio", mod(func(p *Policy) { p.FailureRatio = -0.5 }), "failureRatio"},
		{"ratio above 1", mod(func(p *Policy) { p.FailureRatio = 1.01 }), "failureRatio"},
		{"NaN ratio", mod(func(p *Policy) { p.FailureRatio = nan }), "failureRatio"},
		{"negative minimum", mod(func(p *Policy) { p.MinimumThroughput = -1 }), "minimumThroughput"},
		{"negative threshold", mod(func(p *Policy) { p.SuccessThreshold = -2 }), "successThreshold"},
		{"negative probes", mod(func(p *Policy) { p.HalfOpenPermittedCalls = -1 }), "halfOpenPermittedCalls"},
		{"negative slow duration", mod(func(p *Policy) { p.SlowCallDuration = -1 }), "slowCallDuration"},
		{"slow ratio above 1", mod(func(p *Policy) { p.SlowCallRatio = 2 }), "slowCallRatio"},
		{"negative backoff", mod(func(p *Policy) { p.MaxOpenTimeout = -1 }), "maxOpenTimeout"},
		{"backoff below the default open timeout", Policy{MaxOpenTimeout: 10 * time.Second}, "maxOpenTimeout"},
		{"unknown mode", mod(func(p *Policy) { p.Mode = "enforce" }), "mode"},
		{"ratio of exactly 1", mod(func(p *Policy) { p.FailureRatio = 1 }), ""},
		{"empty mode", mod(func(p *Policy) { p.Mode = "" }), ""},
		{"tiny durations", mod(func(p *Policy) { p.Window, p.OpenTimeout = 1, 1 }), ""},
		{"the zero policy", Policy{}, ""},
		{"zero fields", Policy{OpenTimeout: time.Minute, MaxOpenTimeout: 4 * time.Minute}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.p.Validate()
			if tt.field == "" {
				if err != nil {
					t.Fatalf("refused a valid policy: %v", err)
				}
				return
			}
			fe, ok := errors.AsType[*fieldError](err)
			if !ok || fe.Field != tt.field || !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("got %v, want an error naming %s", err, tt.field)
			}
			if _, err := New("x", tt.p); err == nil {
				t.Fatal("New accepted an invalid policy")
			}
		})
	}
	t.Run("every bad field is named", func(t *testing.T) {
		err := Policy{OpenTimeout: -1, Window: -1, FailureRatio: -1, MinimumThroughput: -1, SuccessThreshold: -1, HalfOpenPermittedCalls: -1}.Validate()
		for _, f := range []string{"openTimeout", "window", "failureRatio", "minimumThroughput", "successThreshold", "halfOpenPermittedCalls"} {
			if !strings.Contains(err.Error(), f) {
				t.Errorf("%v does not name %s", err, f)
			}
		}
	})
}

// TestZeroPolicy: a zero Policy, or zero fields, take DefaultPolicy's values, as a zero
// gobreaker.Settings does; Policy reports the values in force.
func TestZeroPolicy(t *testing.T) {
	b, err := New("zero", Policy{})
	if err != nil {
		t.Fatal(err)
	}
	if got := b.Policy(); got != DefaultPolicy() {
		t.Fatalf("Policy() = %+v, want DefaultPolicy %+v", got, DefaultPolicy())
	}
	b, clock, _ := newTestBreaker(t, Policy{OpenTimeout: time.Minute, MinimumThroughput: 4})
	want := DefaultPolicy()
	want.OpenTimeout, want.MinimumThroughput = time.Minute, 4
	if got := b.Policy(); got != want {
		t.Fatalf("Policy() = %+v, want %+v", got, want)
	}
	openIt(t, b, clock)
	clock.Advance(time.Minute - 1)
	wantState(t, b, Open)
	clock.Advance(1)
	wantState(t, b, HalfOpen)
	// Update takes zero fields the same way: back to the default open timeout.
	if err := b.Update(Policy{}); err != nil || b.Policy() != DefaultPolicy() {
		t.Fatalf("Update(Policy{}) = %v, policy %+v", err, b.Policy())
	}
}
