package breaker

import (
	"context"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker/internal/fakeclock"
)

// drive runs rounds of calls on the fake clock until d has passed: each round takes every
// slot the limit leaves (up to demand), lets latency(limit) pass, and ends them all. It
// reports the lowest and highest limit seen.
func drive(t *testing.T, b *Breaker, clock *fakeclock.Clock, d time.Duration, demand int, latency func(inFlight int) time.Duration) (lo, hi int) {
	t.Helper()
	lo, hi = 1<<30, 0
	for end := clock.Now().Add(d); clock.Now().Before(end); {
		var dones []func(error)
		for len(dones) < demand {
			done, err := b.Allow()
			if err != nil {
				break
			}
			dones = append(dones, done)
		}
		if len(dones) == 0 {
			t.Fatal("the limit admits no call at all")
		}
		clock.Advance(latency(len(dones)))
		for _, done := range dones {
			done(nil)
		}
		l := b.Traffic().Limit
		lo, hi = min(lo, l), max(hi, l)
	}
	return lo, hi
}

func adaptiveBreaker(t *testing.T, ceiling, minLimit int) (*Breaker, *fakeclock.Clock) {
	t.Helper()
	p := testPolicy()
	p.MaxInFlight, p.Adaptive = ceiling, &AdaptiveConcurrency{MinLimit: minLimit}
	b, clock, _ := limitedBreaker(t, p, false)
	return b, clock
}

func fixed(d time.Duration) func(int) time.Duration { return func(int) time.Duration { return d } }

// At its baseline the dependency keeps the limit at the ceiling; slower than Tolerance ×
// baseline, the limit falls, never below MinLimit; with the fleet's baseline published,
// the pod's own never exceeds it.
func TestAdaptiveCutsWhenTheDependencySlows(t *testing.T) {
	b, clock := adaptiveBreaker(t, 100, 5)
	b.SetFleet(Fleet{Baseline: 10 * time.Millisecond})
	if lo, hi := drive(t, b, clock, 30*time.Second, 200, fixed(10*time.Millisecond)); lo != 100 || hi != 100 {
		t.Errorf("at the baseline: limit within [%d, %d], want 100", lo, hi)
	}
	if bl := b.Traffic().Baseline; bl != 10*time.Millisecond {
		t.Errorf("baseline %v, want 10ms", bl)
	}
	lo, _ := drive(t, b, clock, 50*time.Second, 200, fixed(40*time.Millisecond))
	tr := b.Traffic()
	if lo != 5 || tr.Limit != 5 {
		t.Errorf("4× slower for 50s: limit %d (lowest %d), want MinLimit 5", tr.Limit, lo)
	}
	if tr.Baseline != 10*time.Millisecond {
		t.Errorf("baseline %v drifted above the fleet's 10ms", tr.Baseline)
	}
}

// A limit at its floor for a whole long window no longer caps its baseline: the
// slowness is the dependency's own speed, which the baseline learns, and the limit grows
// back to the ceiling. Without the fleet's baseline the same happens by drift, sooner.
func TestAdaptiveLearnsALastingSlowdown(t *testing.T) {
	oneGoroutine(t)
	for _, fleet := range []time.Duration{10 * time.Millisecond, 0} {
		b, clock := adaptiveBreaker(t, 100, 5)
		b.SetFleet(Fleet{Baseline: fleet})
		drive(t, b, clock, 30*time.Second, 200, fixed(10*time.Millisecond))
		drive(t, b, clock, 10*time.Minute, 200, fixed(40*time.Millisecond))
		tr := b.Traffic()
		if tr.Limit != 100 || tr.Baseline < 30*time.Millisecond {
			t.Errorf("fleet baseline %v: after 10 minutes 4× slower whatever the load: limit %d, baseline %v; want 100 and the new speed learnt", fleet, tr.Limit, tr.Baseline)
		}
	}
}

// A latency that grows with the calls in flight is what the limit can relieve: with the
// fleet's baseline the limit settles where latency is about Tolerance × baseline and stays
// there; without it, the baseline drifts up and the limit climbs back.
func TestAdaptiveHoldsUnderTheFleetBaseline(t *testing.T) {
	oneGoroutine(t)
	queueing := func(inFlight int) time.Duration {
		x := max(1, float64(inFlight)/40) // capacity 40 calls in flight
		return time.Duration(float64(10*time.Millisecond) * x * x)
	}
	for _, tc := range []struct {
		fleet  time.Duration
		lo, hi int // where the limit must stay over the last 9 minutes
	}{{10 * time.Millisecond, 40, 60}, {0, 80, 100}} {
		b, clock := adaptiveBreaker(t, 100, 1)
		b.SetFleet(Fleet{Baseline: tc.fleet})
		drive(t, b, clock, 10*time.Second, 200, fixed(10*time.Millisecond))
		drive(t, b, clock, time.Minute, 200, queueing)
		lo, hi := drive(t, b, clock, 9*time.Minute, 200, queueing)
		t.Logf("fleet baseline %v: limit within [%d, %d] over the last 9 minutes, baseline %v at the end", tc.fleet, lo, hi, b.Traffic().Baseline)
		if tc.fleet != 0 && (lo < tc.lo || hi > tc.hi) {
			t.Errorf("with the fleet's baseline: limit within [%d, %d], want within [%d, %d]", lo, hi, tc.lo, tc.hi)
		}
		if tc.fleet == 0 && hi < tc.lo {
			t.Errorf("without the fleet's baseline: the limit reached only %d, want a drift back above %d", hi, tc.lo)
		}
	}
}

// The ceiling is MaxInFlight: lowering it lowers the limit at once; MinLimit above it
// gives way to it.
func TestAdaptiveCeiling(t *testing.T) {
	p := testPolicy()
	p.MaxInFlight, p.Adaptive = 50, &AdaptiveConcurrency{MinLimit: 10}
	b, _, _ := limitedBreaker(t, p, false)
	p.MaxInFlight = 20
	_ = b.Update(p)
	if l := b.Traffic().Limit; l != 20 {
		t.Errorf("limit %d after the share fell to 20", l)
	}
	p.MaxInFlight = 4
	_ = b.Update(p)
	if l := b.Traffic().Limit; l != 4 {
		t.Errorf("limit %d with MinLimit 10 above a share of 4", l)
	}
}

// A call its caller gave up on, or one that panicked, says nothing of the dependency's
// latency: it is not sampled.
func TestAdaptiveSamples(t *testing.T) {
	b, clock := adaptiveBreaker(t, 10, 1)
	_ = b.Execute(context.Background(), func(context.Context) error { clock.Advance(time.Millisecond); return context.Canceled })
	func() {
		defer func() { _ = recover() }()
		_ = b.Execute(context.Background(), func(context.Context) error { panic("boom") })
	}()
	done, _ := b.Allow()
	done(context.Canceled)
	samples := func() (count, micros uint64) {
		v := b.lim.word.Load()
		return (v & sampleCountMask) >> inFlightBits, v >> sampleSumShift
	}
	if n, _ := samples(); n != 0 {
		t.Errorf("%d samples after calls that were not to be sampled", n)
	}
	_ = b.Execute(context.Background(), func(context.Context) error { clock.Advance(3 * time.Millisecond); return errBoom })
	done, _ = b.Allow()
	clock.Advance(5 * time.Millisecond)
	done(nil)
	if n, us := samples(); n != 2 || us != 8000 || b.lim.inFlight() != 0 {
		t.Errorf("samples: %d calls, %d µs, %d in flight; want 2, 8000 and 0", n, us, b.lim.inFlight())
	}
}
