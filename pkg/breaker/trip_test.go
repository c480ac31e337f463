package breaker

import (
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// TestTripIsIdempotent: Trip on an open circuit restarts its open period but is not a
// state change (§5.7): three Trips on a closed circuit make exactly one transition.
func TestTripIsIdempotent(t *testing.T) {
	p := testPolicy()
	p.MaxOpenTimeout = 4 * p.OpenTimeout
	b, clock, rec := newTestBreaker(t, p)
	b.Trip()
	clock.Advance(10 * time.Second)
	b.Trip()
	clock.Advance(10 * time.Second)
	b.Trip()
	tr := rec.takeTransitions()
	if len(tr) != 1 || tr[0].From != Closed || tr[0].To != Open || tr[0].Reason != breakerconfig.ReasonManual {
		t.Fatalf("three Trips made transitions %+v, want one closed → open", tr)
	}
	// The open period runs from the last Trip, with its length unchanged: a restart does
	// not count as another consecutive open, so it backs nothing off.
	v := b.Verdict()
	if !v.Since.Equal(clock.Now()) || v.ConsecutiveOpens != 1 || v.OpenTimeout != p.OpenTimeout {
		t.Fatalf("verdict %+v, want open since the last Trip, 1st open period of %v", v, p.OpenTimeout)
	}
	if d, ok := b.RetryAfter(); !ok || d != p.OpenTimeout {
		t.Fatalf("RetryAfter = %v, %v; want the full %v", d, ok, p.OpenTimeout)
	}
	clock.Advance(p.OpenTimeout - time.Nanosecond)
	wantState(t, b, Open)
	clock.Advance(time.Nanosecond)
	wantState(t, b, HalfOpen)
	if tr := rec.takeTransitions(); len(tr) != 1 || tr[0].To != HalfOpen {
		t.Fatalf("transitions %+v, want open → half-open", tr)
	}

	// Half-open, Trip is a transition again: it re-opens.
	b.Trip()
	if tr := rec.takeTransitions(); len(tr) != 1 || tr[0].From != HalfOpen || tr[0].To != Open || tr[0].Reason != breakerconfig.ReasonManual {
		t.Fatalf("Trip while half-open made %+v, want half-open → open", tr)
	}
}

// TestTripAfterTheOpenPeriodEnded: an open circuit whose period time has ended is
// half-open, however late anything looks; Trip then re-opens it, as two transitions.
func TestTripAfterTheOpenPeriodEnded(t *testing.T) {
	b, clock, rec := newTestBreaker(t, testPolicy())
	b.Trip()
	clock.Advance(time.Minute)
	b.Trip()
	tr := rec.takeTransitions()
	if len(tr) != 3 || tr[1].To != HalfOpen || tr[1].Reason != breakerconfig.ReasonTimedOut || tr[2].From != HalfOpen || tr[2].To != Open {
		t.Fatalf("transitions %+v, want closed → open → half-open → open", tr)
	}
}

// TestAdoptBoundsTheOpenPeriod: a verdict from elsewhere cannot hold this circuit open
// longer than its own policy allows (§5.12): a century-long open period counts as the
// policy's longest, MaxOpenTimeout with backoff, OpenTimeout without; a count of
// consecutive opens is kept short of an overflow, and the next open period, counted on
// from it, is capped by the same bound.
func TestAdoptBoundsTheOpenPeriod(t *testing.T) {
	century := Verdict{State: Open, ConsecutiveOpens: 1 << 40, OpenTimeout: 876000 * time.Hour}
	for _, c := range []struct {
		name      string
		max       time.Duration
		bound     time.Duration
		fromClose bool
	}{
		{"backoff, from closed", time.Minute, time.Minute, true},
		{"backoff, already open", time.Minute, time.Minute, false},
		{"no backoff, from closed", 0, 30 * time.Second, true},
		{"no backoff, already open", 0, 30 * time.Second, false},
		{"a long backoff", 5 * time.Minute, 5 * time.Minute, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := testPolicy()
			p.MaxOpenTimeout = c.max
			b, clock, rec := newTestBreaker(t, p)
			if !c.fromClose {
				b.Trip()
			}
			v := century
			v.Since = clock.Now()
			b.Adopt(v)
			got := b.Verdict()
			if got.State != Open || got.OpenTimeout != c.bound || got.ConsecutiveOpens != 1<<30 {
				t.Fatalf("after adopting %+v: %+v, want open for %v, count 2^30", v, got, c.bound)
			}
			if tr := rec.takeTransitions(); c.fromClose && (len(tr) != 1 || tr[0].OpenTimeout != c.bound) {
				t.Fatalf("transitions %+v, want one open for %v", tr, c.bound)
			}
			clock.Advance(c.bound - time.Nanosecond)
			wantState(t, b, Open)
			clock.Advance(time.Nanosecond)
			wantState(t, b, HalfOpen)
			// The next open period, counted on from the verdict's, is no longer.
			b.Trip()
			if got := b.Verdict(); got.OpenTimeout != c.bound || got.ConsecutiveOpens != 1<<30+1 {
				t.Fatalf("next open period %+v, want %v, count 2^30+1", got, c.bound)
			}
		})
	}
}

// TestAdoptClampsSinceToNow: a verdict dated ahead of this process's clock counts as
// reached now: it cannot move the open period's end past now + the policy's bound.
func TestAdoptClampsSinceToNow(t *testing.T) {
	b, clock, _ := newTestBreaker(t, testPolicy())
	now := clock.Now()
	b.Adopt(Verdict{State: Open, Since: now.Add(100 * 365 * 24 * time.Hour), OpenTimeout: 876000 * time.Hour})
	if v := b.Verdict(); !v.Since.Equal(now) || v.OpenTimeout != 30*time.Second {
		t.Fatalf("verdict %+v, want open since now (%v) for 30s", v, now)
	}
	clock.Advance(30 * time.Second)
	wantState(t, b, HalfOpen)
}
