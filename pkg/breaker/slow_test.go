package breaker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/internal/fakeclock"
	"github.com/fusebox-dev/fusebox/pkg/breaker/observe"
)

// Slow calls and backed-off open periods (docs/design.md §5.13). The model test covers them
// over random sequences; these tests spell out the cases a reader looks for.

func slowPolicy() Policy {
	p := DefaultPolicy()
	p.MinimumThroughput = 4
	p.SlowCallDuration = time.Second
	p.SlowCallRatio = 0.5
	return p
}

// takes returns a protected function that lets d pass on clock before it returns err.
func takes(clock *fakeclock.Clock, d time.Duration, err error) func(context.Context) error {
	return func(context.Context) error {
		clock.Advance(d)
		return err
	}
}

func TestSlowCallsOpenTheCircuit(t *testing.T) {
	for _, observed := range []bool{false, true} {
		clock := newFakeClock()
		rec := &recorder{}
		var obs observe.Observer = transitionsOnly{rec}
		if observed {
			obs = rec
		}
		b, err := New("slow", slowPolicy(), WithClock(clock), WithObserver(obs))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		// Every call succeeds; two of the first three take at least a second. Three calls
		// are below minimumThroughput, so nothing opens yet.
		for _, d := range []time.Duration{2 * time.Second, 10 * time.Millisecond, time.Second} {
			if err := b.Execute(ctx, takes(clock, d, nil)); err != nil {
				t.Fatal(err)
			}
		}
		if got := b.Counts(); got != (Counts{Calls: 3, Slow: 2}) {
			t.Fatalf("observed=%v: Counts = %+v, want 3 calls, 2 slow", observed, got)
		}
		// A fast success brings the window to four calls with half of them slow: the
		// circuit opens after it, although it was neither slow nor a failure.
		if err := b.Execute(ctx, takes(clock, time.Millisecond, nil)); err != nil {
			t.Fatal(err)
		}
		if b.State() != Open {
			t.Fatalf("observed=%v: state %v after 2 slow calls of 4, want open", observed, b.State())
		}
		tr := rec.takeTransitions()
		if len(tr) != 1 || tr[0].Trigger != breakerconfig.TriggerSlowCallRate || tr[0].Reason != breakerconfig.ReasonTripped || tr[0].Counts != (Counts{Calls: 4, Slow: 2}) {
			t.Fatalf("observed=%v: transitions %+v, want one to open on the slow-call rate with 2 slow of 4", observed, tr)
		}
		if got := b.Counts(); got != (Counts{Calls: 4, Slow: 2}) {
			t.Errorf("observed=%v: open Counts = %+v, want the tally that opened it", observed, got)
		}
	}
}

func TestSlowCallJudging(t *testing.T) {
	ctx := context.Background()
	t.Run("off by default", func(t *testing.T) {
		clock := newFakeClock()
		p := DefaultPolicy()
		p.MinimumThroughput = 1
		b, _ := New("b", p, WithClock(clock))
		for range 5 {
			_ = b.Execute(ctx, takes(clock, time.Hour, nil))
		}
		if c := b.Counts(); c.Slow != 0 || b.State() != Closed {
			t.Errorf("without SlowCallDuration: %+v, %v", c, b.State())
		}
	})
	t.Run("failures and slow calls are judged apart", func(t *testing.T) {
		clock := newFakeClock()
		p := slowPolicy()
		p.FailureRatio = 1
		b, _ := New("b", p, WithClock(clock))
		// A slow failure is both; one fast success keeps the failure rate below 100%,
		// and the slow-call rate of 3 in 4 opens it.
		_ = b.Execute(ctx, takes(clock, 0, nil))
		for range 3 {
			_ = b.Execute(ctx, takes(clock, 3*time.Second, errBoom))
		}
		if b.State() != Open {
			t.Fatalf("state %v, want open on slow calls", b.State())
		}
		if c := b.Counts(); c != (Counts{Calls: 4, Failures: 3, Slow: 3}) {
			t.Errorf("Counts = %+v", c)
		}
	})
	t.Run("a cancelled call is never slow", func(t *testing.T) {
		clock := newFakeClock()
		b, _ := New("b", slowPolicy(), WithClock(clock))
		for range 4 {
			_ = b.Execute(ctx, takes(clock, time.Minute, context.Canceled))
		}
		if c := b.Counts(); c != (Counts{}) || b.State() != Closed {
			t.Errorf("cancelled calls: %+v, %v", c, b.State())
		}
	})
	t.Run("Allow times from the admission", func(t *testing.T) {
		clock := newFakeClock()
		b, _ := New("b", slowPolicy(), WithClock(clock))
		done, err := b.Allow()
		if err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Second)
		done(nil)
		if c := b.Counts(); c != (Counts{Calls: 1, Slow: 1}) {
			t.Errorf("Counts = %+v, want one slow call", c)
		}
	})
	t.Run("MetricsOnly reports a slow-call trip", func(t *testing.T) {
		clock := newFakeClock()
		rec := &recorder{}
		p := slowPolicy()
		p.Mode = ModeMetricsOnly
		b, _ := New("b", p, WithClock(clock), WithObserver(rec))
		for range 4 {
			_ = b.Execute(ctx, takes(clock, 2*time.Second, nil))
		}
		tr := rec.takeTransitions()
		if len(tr) != 1 || tr[0].To != Open || tr[0].Trigger != breakerconfig.TriggerSlowCallRate {
			t.Fatalf("transitions %+v, want one slow-call trip", tr)
		}
		ran := false
		_ = b.Execute(ctx, func(context.Context) error { ran = true; return nil })
		if !ran {
			t.Error("MetricsOnly refused a call")
		}
	})
	t.Run("ForcedClosed never opens", func(t *testing.T) {
		clock := newFakeClock()
		p := slowPolicy()
		p.Mode = ModeForcedClosed
		b, _ := New("b", p, WithClock(clock))
		for range 5 {
			_ = b.Execute(ctx, takes(clock, time.Second, nil))
		}
		if c := b.Counts(); b.State() != Closed || c.Slow != 5 {
			t.Errorf("ForcedClosed: %v, %+v", b.State(), c)
		}
	})
	t.Run("the real clock", func(t *testing.T) {
		// Without an injected clock, durations under 50ms are timed on the exact clock
		// and longer ones on the coarse clock; both must see a call that takes twice the
		// threshold as slow and an instant one as not.
		for _, d := range []time.Duration{5 * time.Millisecond, 60 * time.Millisecond} {
			p := slowPolicy()
			p.SlowCallDuration = d
			b, _ := New("b", p)
			_ = b.Execute(ctx, func(context.Context) error { return nil })
			_ = b.Execute(ctx, func(context.Context) error { time.Sleep(2 * d); return nil })
			if c := b.Counts(); c != (Counts{Calls: 2, Slow: 1}) {
				t.Errorf("SlowCallDuration %v: Counts = %+v, want 1 slow of 2", d, c)
			}
		}
	})
}

func TestSlowProbeReopens(t *testing.T) {
	clock := newFakeClock()
	rec := &recorder{}
	p := slowPolicy()
	p.SuccessThreshold = 2
	b, _ := New("b", p, WithClock(clock), WithObserver(rec))
	ctx := context.Background()
	b.Trip()
	clock.Advance(p.OpenTimeout)
	if err := b.Execute(ctx, takes(clock, 0, nil)); err != nil {
		t.Fatal(err)
	}
	// The second probe succeeds, slowly: it re-opens the circuit instead of closing it.
	if err := b.Execute(ctx, takes(clock, 5*time.Second, nil)); err != nil {
		t.Fatal(err)
	}
	tr := rec.takeTransitions()
	last := tr[len(tr)-1]
	if b.State() != Open || last.Trigger != breakerconfig.TriggerSlowProbe || last.From != HalfOpen || last.Counts != (Counts{Calls: 2, Successes: 1, Slow: 1}) {
		t.Fatalf("state %v, last transition %+v: want a slow probe to re-open", b.State(), last)
	}
}

func TestBackoff(t *testing.T) {
	clock := newFakeClock()
	rec := &recorder{}
	p := DefaultPolicy()
	p.OpenTimeout = time.Second
	p.MaxOpenTimeout = 5 * time.Second
	p.SuccessThreshold = 1
	b, _ := New("b", p, WithClock(clock), WithObserver(rec))
	ctx := context.Background()

	// openFor checks the open period the breaker says it is in, everywhere it says it.
	openFor := func(k int, want time.Duration) {
		t.Helper()
		if d, ok := b.RetryAfter(); !ok || d != want {
			t.Fatalf("open #%d: RetryAfter = %v, %v; want %v", k, d, ok, want)
		}
		if v := b.Verdict(); v.State != Open || v.ConsecutiveOpens != k || v.OpenTimeout != want {
			t.Fatalf("open #%d: Verdict = %+v, want %v for %v", k, v, k, want)
		}
		tr := rec.takeTransitions()
		if l := tr[len(tr)-1]; l.To != Open || l.ConsecutiveOpens != k || l.OpenTimeout != want {
			t.Fatalf("open #%d: transition %+v", k, l)
		}
	}
	b.Trip()
	openFor(1, time.Second)
	// Each failed probe starts the next open period, twice as long, up to the cap.
	cur := time.Second
	for k, want := range []time.Duration{2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second} {
		clock.Advance(cur - time.Millisecond)
		if err := b.Execute(ctx, succeed); !errors.Is(err, ErrOpen) {
			t.Fatalf("open #%d (%v) admitted a call before its end", k+1, cur)
		}
		clock.Advance(time.Millisecond)
		_ = b.Execute(ctx, takes(clock, 0, errBoom))
		openFor(k+2, want)
		cur = want
	}
	// A close resets the count: the next open lasts openTimeout again.
	clock.Advance(5 * time.Second)
	if err := b.Execute(ctx, succeed); err != nil || b.State() != Closed {
		t.Fatalf("probe: %v, state %v", err, b.State())
	}
	if v := b.Verdict(); v.ConsecutiveOpens != 0 || v.OpenTimeout != 0 {
		t.Errorf("closed verdict %+v", v)
	}
	b.Trip()
	openFor(1, time.Second)

	// Update re-times the running open period under the new policy.
	p.OpenTimeout = 2 * time.Second
	p.MaxOpenTimeout = time.Minute
	if err := b.Update(p); err != nil {
		t.Fatal(err)
	}
	if d, _ := b.RetryAfter(); d != 2*time.Second {
		t.Errorf("after Update: RetryAfter = %v, want 2s", d)
	}
}

func TestAdoptKeepsTheVerdictsOpenPeriod(t *testing.T) {
	clock := newFakeClock()
	p := DefaultPolicy()
	p.OpenTimeout = time.Second
	p.MaxOpenTimeout = time.Minute
	b, _ := New("b", p, WithClock(clock))
	// The fleet is in its fourth open period, eight seconds long, started a second ago.
	v := Verdict{State: Open, Since: clock.Now().Add(-time.Second), ConsecutiveOpens: 4, OpenTimeout: 8 * time.Second}
	if !b.Adopt(v) {
		t.Fatal("Adopt refused an open verdict")
	}
	if d, _ := b.RetryAfter(); d != 7*time.Second {
		t.Errorf("RetryAfter = %v, want the verdict's period less the second gone", d)
	}
	if got := b.Verdict(); got.ConsecutiveOpens != 4 || got.OpenTimeout != 8*time.Second {
		t.Errorf("Verdict = %+v", got)
	}
	// A later delivery of the fleet's next period re-times the running one.
	v.ConsecutiveOpens, v.OpenTimeout = 5, 16*time.Second
	b.Adopt(v)
	if d, _ := b.RetryAfter(); d != 15*time.Second {
		t.Errorf("RetryAfter = %v after the next period, want 15s", d)
	}
	// Its own next open, after a failed probe, follows on from the fleet's count.
	clock.Advance(16 * time.Second)
	_ = b.Execute(context.Background(), takes(clock, 0, errBoom))
	if got := b.Verdict(); got.State != Open || got.ConsecutiveOpens != 6 || got.OpenTimeout != 32*time.Second {
		t.Errorf("after a failed probe: %+v, want the 6th open, 32s", got)
	}
	// A verdict without a period (an older writer) gets the local policy's.
	b2, _ := New("b2", p, WithClock(clock))
	b2.Adopt(Verdict{State: Open, Since: clock.Now()})
	if got := b2.Verdict(); got.ConsecutiveOpens != 1 || got.OpenTimeout != time.Second {
		t.Errorf("verdict without a period: %+v", got)
	}
}

func TestPolicyValidateNewFields(t *testing.T) {
	for _, tc := range []struct {
		mut   func(*Policy)
		field string
	}{
		{func(p *Policy) { p.SlowCallDuration = -1 }, "slowCallDuration"},
		{func(p *Policy) { p.SlowCallDuration, p.SlowCallRatio = time.Second, -0.5 }, "slowCallRatio"},
		{func(p *Policy) { p.SlowCallRatio = 1.5 }, "slowCallRatio"},
		{func(p *Policy) { p.MaxOpenTimeout = -time.Second }, "maxOpenTimeout"},
		{func(p *Policy) { p.MaxOpenTimeout = time.Second }, "maxOpenTimeout"},
	} {
		p := DefaultPolicy()
		tc.mut(&p)
		err := p.Validate()
		var fe *fieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%+v: Validate() = %v, want an error naming %s", p, err, tc.field)
		}
	}
	p := DefaultPolicy()
	p.SlowCallDuration, p.MaxOpenTimeout = time.Millisecond, p.OpenTimeout
	if err := p.Validate(); err != nil {
		t.Errorf("valid policy refused: %v", err)
	}
}

func TestOpenPeriod(t *testing.T) {
	p := Policy{OpenTimeout: 30 * time.Second, MaxOpenTimeout: 24 * time.Hour}
	for k, want := range map[int]time.Duration{0: 30 * time.Second, 1: 30 * time.Second, 2: time.Minute, 3: 2 * time.Minute, 12: 30 * time.Second << 11, 13: 24 * time.Hour, 1 << 30: 24 * time.Hour} {
		if got := p.openPeriod(k); got != want {
			t.Errorf("openPeriod(%d) = %v, want %v", k, got, want)
		}
	}
	huge := Policy{OpenTimeout: time.Duration(1) << 61, MaxOpenTimeout: time.Duration(1<<63 - 1)}
	if got := huge.openPeriod(10); got != huge.MaxOpenTimeout {
		t.Errorf("openPeriod near the int64 limit = %v, want the cap", got)
	}
}

// TestHalfOpenDatedAtTheEndOfTheOpenPeriod: a circuit whose open period ended while nobody
// looked is half-open from the period's end, not from when it is next looked at, so that
// an open verdict reached elsewhere after that end (another pod of the fleet whose probe
// failed) is news and not stale, and the fleet backs off as one.
func TestHalfOpenDatedAtTheEndOfTheOpenPeriod(t *testing.T) {
	clock := newFakeClock()
	p := DefaultPolicy()
	p.OpenTimeout, p.MaxOpenTimeout = time.Second, time.Minute
	b, _ := New("b", p, WithClock(clock))
	b.Trip()
	opened := clock.Now()
	reopened := opened.Add(1200 * time.Millisecond) // another pod's probe failed then
	clock.Advance(1500 * time.Millisecond)
	if v := b.Verdict(); v.State != HalfOpen || !v.Since.Equal(opened.Add(time.Second)) {
		t.Fatalf("looked at 1.5s after a 1s open period: %+v, want half-open since 1s", v)
	}
	if !b.Adopt(Verdict{State: Open, Since: reopened, ConsecutiveOpens: 2, OpenTimeout: 2 * time.Second}) {
		t.Fatal("the fleet's next open period was refused as stale")
	}
	if v := b.Verdict(); v.State != Open || v.ConsecutiveOpens != 2 || v.OpenTimeout != 2*time.Second || !v.Since.Equal(reopened) {
		t.Errorf("after adopting the fleet's re-open: %+v", v)
	}
	if d, _ := b.RetryAfter(); d != 1700*time.Millisecond {
		t.Errorf("RetryAfter = %v, want the rest of the fleet's 2s period", d)
	}
}

// TestLeakedProbeReopenDatedWhenItHappened: the re-open over a leaked probe is dated when
// the half-open period timed out, not when it is noticed, so that a close reached elsewhere
// in between (the fleet's) still ends it.
func TestLeakedProbeReopenDatedWhenItHappened(t *testing.T) {
	clock := newFakeClock()
	p := DefaultPolicy()
	p.OpenTimeout = time.Second
	b, _ := New("b", p, WithClock(clock))
	b.Trip()
	clock.Advance(time.Second)
	if _, err := b.Allow(); err != nil { // a probe whose done never comes
		t.Fatal(err)
	}
	leaked := clock.Now().Add(time.Second) // the half-open period times out then
	closed := leaked.Add(300 * time.Millisecond)
	clock.Advance(1500 * time.Millisecond) // nobody looks until now
	if v := b.Verdict(); v.State != Open || !v.Since.Equal(leaked) {
		t.Fatalf("verdict %+v, want open since the time-out at %v", v, leaked)
	}
	if !b.Adopt(Verdict{State: Closed, Since: closed}) || b.State() != Closed {
		t.Errorf("a close reached after the time-out was refused: %v", b.State())
	}
}
