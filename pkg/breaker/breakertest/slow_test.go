package breakertest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakertest"
)

// Slow calls and backed-off open periods (docs/design.md §5.13) with the kit: a slow Upstream on the
// breaker's Clock advances it by its delay inside the call, which the breaker measures
// between the call's start and end.

func slowPolicy(p *breaker.Policy) {
	p.MinimumThroughput = 4
	p.SlowCallDuration = time.Second
	p.SlowCallRatio = 0.5
}

func TestSlowUpstreamOpensBySlowCallRate(t *testing.T) {
	b, clock, rec := newBreaker(t, slowPolicy)
	u := breakertest.NewUpstream(clock)
	u.Slow(time.Second) // exactly SlowCallDuration is slow: at least that long
	ctx := context.Background()
	for range 4 {
		if err := b.Execute(ctx, u.Call); err != nil {
			t.Fatalf("a slow success was refused or failed: %v", err)
		}
	}
	wantState(t, b, breaker.Open)
	last, _ := rec.Last()
	if last.Reason != breakerconfig.ReasonTripped || last.Trigger != breakerconfig.TriggerSlowCallRate {
		t.Fatalf("opened by %v/%v, want Tripped/SlowCallRate", last.Reason, last.Trigger)
	}
	if c := last.Counts; c.Calls != 4 || c.Slow != 4 || c.Failures != 0 {
		t.Fatalf("opened on %+v, want 4 calls, 4 slow, 0 failures", c)
	}
	if clock.Monotonic() != 4*time.Second {
		t.Fatalf("clock at %v, want 4s: one second per call", clock.Monotonic())
	}
}

func TestFastEnoughUpstreamIsNotSlow(t *testing.T) {
	b, clock, _ := newBreaker(t, slowPolicy)
	u := breakertest.NewUpstream(clock)
	u.Slow(time.Second - time.Nanosecond)
	for range 8 {
		_ = b.Execute(context.Background(), u.Call)
	}
	wantState(t, b, breaker.Closed)
	if c := b.Counts(); c.Calls != 8 || c.Slow != 0 {
		t.Fatalf("counts %+v, want 8 calls and none slow", c)
	}
}

func TestSlowProbeReopens(t *testing.T) {
	b, clock, rec := newBreaker(t, slowPolicy)
	if err := breakertest.HalfOpen(b, clock); err != nil {
		t.Fatal(err)
	}
	u := breakertest.NewUpstream(clock)
	u.Slow(2 * time.Second)
	_ = b.Execute(context.Background(), u.Call)
	rec.AssertStates(t, "closed→open", "open→half_open", "half_open→open")
	if last, _ := rec.Last(); last.Trigger != breakerconfig.TriggerSlowProbe {
		t.Fatalf("re-opened by %v, want slow_probe", last.Trigger)
	}
	// Closed's own probes take no time on the Clock, so they are not slow.
	if err := breakertest.Closed(b, clock); err != nil {
		t.Fatal(err)
	}
}

// HalfOpen waits out the open period in force, backed off or not.
func TestHalfOpenWaitsOutBackedOffPeriods(t *testing.T) {
	b, clock, rec := newBreaker(t, func(p *breaker.Policy) {
		p.OpenTimeout = 10 * time.Second
		p.MaxOpenTimeout = 40 * time.Second
	})
	if err := breakertest.Open(b); err != nil {
		t.Fatal(err)
	}
	for k, want := range []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, 40 * time.Second} {
		before := clock.Monotonic()
		if err := breakertest.HalfOpen(b, clock); err != nil {
			t.Fatal(err)
		}
		if got := clock.Monotonic() - before; got != want {
			t.Fatalf("open period %d: HalfOpen advanced %v, want %v", k+1, got, want)
		}
		if err := breakertest.OpenByFailures(b, nil); err != nil { // the probe fails
			t.Fatal(err)
		}
	}
	last, _ := rec.Last()
	if last.ConsecutiveOpens != 5 || last.OpenTimeout != 40*time.Second {
		t.Fatalf("fifth open: %d consecutive, period %v; want 5 and 40s", last.ConsecutiveOpens, last.OpenTimeout)
	}
	// Closing resets the backoff.
	if err := breakertest.Closed(b, clock); err != nil {
		t.Fatal(err)
	}
	if err := breakertest.Open(b); err != nil {
		t.Fatal(err)
	}
	if last, _ := rec.Last(); last.ConsecutiveOpens != 1 || last.OpenTimeout != 10*time.Second {
		t.Fatalf("open after a close: %d consecutive, period %v; want 1 and 10s", last.ConsecutiveOpens, last.OpenTimeout)
	}
}

// On the breaker's Clock a slow Upstream lets its delay pass inside the call, which the
// breaker measures and judges slow, without the test sleeping.
func ExampleUpstream_Slow() {
	clock := breakertest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	p := breaker.DefaultPolicy()
	p.MinimumThroughput = 3
	p.SlowCallDuration = 2 * time.Second
	p.SlowCallRatio = 1
	b, _ := breaker.New("reports", p, breaker.WithClock(clock))
	reports := breakertest.NewUpstream(clock)
	reports.Slow(3 * time.Second)

	for range 4 {
		fmt.Println(b.Execute(context.Background(), reports.Call))
	}
	fmt.Println(b.Counts().Slow, "slow calls in", clock.Monotonic())
	// Output:
	// <nil>
	// <nil>
	// <nil>
	// breaker "reports": circuit open
	// 3 slow calls in 9s
}
