package breaker

import (
	"context"
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker/internal/fakeclock"
	"github.com/fusebox-dev/fusebox/pkg/breaker/observe"
)

// referenceProbability is §5.16's formula in exact rational arithmetic.
func referenceProbability(requests, accepts int64, k float64) float64 {
	num := new(big.Rat).SetInt64(requests)
	num.Sub(num, new(big.Rat).Mul(new(big.Rat).SetFloat64(k), new(big.Rat).SetInt64(accepts)))
	if num.Sign() <= 0 {
		return 0
	}
	f, _ := num.Quo(num, new(big.Rat).SetInt64(requests+1)).Float64()
	return f
}

func TestThrottleProbabilityMatchesReference(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(22, 16))
	for i := range 200000 {
		// Counts from a handful to what a report's schema allows, accepts up to requests
		// (and beyond: the fleet's figures arrive from elsewhere), k over its whole range.
		limit := int64(1) << r.IntN(40)
		requests := r.Int64N(limit + 1)
		accepts := r.Int64N(limit + 1)
		if i%2 == 0 {
			accepts = r.Int64N(requests + 1)
		}
		k := 1 + 9*r.Float64()
		if i%10 == 0 {
			k = float64(1 + r.IntN(10))
		}
		got, want := throttleProbability(requests, accepts, k), referenceProbability(requests, accepts, k)
		if math.Abs(got-want) > 1e-12 || got < 0 || got >= 1 {
			t.Fatalf("p(%d, %d, %v) = %.17g, reference %.17g", requests, accepts, k, got, want)
		}
	}
}

// throttleFixture is a breaker throttling with k 2 whose window cannot open the circuit, on
// a fake clock, drawing its randomness from draw.
func throttleFixture(t *testing.T, p Policy, draw *float64, opts ...Option) (*Breaker, *fakeclock.Clock) {
	t.Helper()
	clk := newFakeClock()
	if p.Throttle == nil {
		p.Throttle = &Throttle{K: 2}
	}
	if p.FailureRatio == 0 {
		p.FailureRatio = 1
		p.MinimumThroughput = 10
	}
	b, err := New("t", p, append([]Option{WithClock(clk)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	b.rnd = func() float64 { return *draw }
	return b, clk
}

func fail(context.Context) error { return errBoom }

// Ten failures and no success: p = 10/11 for the next call, and a draw below it rejects.
func TestThrottleRejectsClosedCalls(t *testing.T) {
	for _, observed := range []bool{false, true} {
		var opts []Option
		rec := &recorder{}
		if observed {
			opts = append(opts, WithObserver(rec))
		}
		draw := 1.0 // admit while the window fills
		b, _ := throttleFixture(t, Policy{}, &draw, opts...)
		for range 5 {
			_ = b.Execute(context.Background(), fail)
		}
		_ = b.Execute(context.Background(), succeed)
		// requests 6, accepts 1: p = 4/7.
		draw = 4.0/7 - 1e-9
		ran := false
		err := b.Execute(context.Background(), func(context.Context) error { ran = true; return nil })
		if ran || !errors.Is(err, ErrOpen) || !errors.Is(err, ErrThrottled) {
			t.Fatalf("observed=%v: ran=%v err=%v, want a throttled refusal", observed, ran, err)
		}
		if oe, _ := errors.AsType[*openError](err); oe.reason != rejectThrottled {
			t.Fatalf("reason %v", oe.reason)
		}
		if c := b.Counts(); c.Calls != 6 || c.Failures != 5 {
			t.Fatalf("a throttled call was recorded: %+v", c)
		}
		// requests 7 (the throttled one counts), accepts 1: p = 5/8; a draw just above it
		// admits.
		draw = 5.0 / 8
		if err := b.Execute(context.Background(), succeed); err != nil {
			t.Fatalf("observed=%v: draw at p refused: %v", observed, err)
		}
		if tr := b.Traffic(); tr != (Traffic{Requests: 8, Accepts: 2, Throttled: 1}) {
			t.Fatalf("Traffic() = %+v", tr)
		}
		if observed {
			var rejected int
			for _, e := range rec.ends {
				if e.Outcome == observe.OutcomeRejected && errors.Is(e.Err, ErrThrottled) {
					rejected++
				}
			}
			if rejected != 1 {
				t.Fatalf("observer saw %d throttled calls, want 1", rejected)
			}
		}
		// Call runs the Open fallback for a throttled call, as for any short-circuit.
		draw = 0
		v, err := Call(context.Background(), b, Callbacks[int]{
			Closed: func(context.Context) (int, error) { return 1, nil },
			Open: func(_ context.Context, cause error) (int, error) {
				if !errors.Is(cause, ErrThrottled) {
					t.Errorf("fallback cause %v", cause)
				}
				return 2, nil
			},
		})
		if v != 2 || err != nil {
			t.Fatalf("Call = %d, %v; want the fallback's 2", v, err)
		}
	}
}

// Throttling is the closed state's: it never refuses a probe, and modes that never refuse a
// closed call (MetricsOnly, ForcedClosed) do not throttle either.
func TestThrottleOnlyWhenClosedAndEnforcing(t *testing.T) {
	draw := 1.0
	b, clk := throttleFixture(t, Policy{OpenTimeout: time.Second}, &draw)
	for range 5 {
		_ = b.Execute(context.Background(), fail)
	}
	draw = 0
	if err := b.Execute(context.Background(), succeed); !errors.Is(err, ErrThrottled) {
		t.Fatalf("closed: %v, want throttled", err)
	}
	b.Trip()
	if err := b.Execute(context.Background(), succeed); !errors.Is(err, ErrOpen) || errors.Is(err, ErrThrottled) {
		t.Fatalf("open: %v, want an open refusal that is not a throttling", err)
	}
	clk.Advance(time.Second)
	for i := range 2 {
		if err := b.Execute(context.Background(), succeed); err != nil {
			t.Fatalf("probe %d: %v", i, err)
		}
	}
	if s := b.State(); s != Closed {
		t.Fatalf("state %v after two probe successes", s)
	}
	for _, mode := range []Mode{ModeMetricsOnly, ModeForcedClosed} {
		draw = 0
		b, _ := throttleFixture(t, Policy{Mode: mode}, &draw)
		for range 5 {
			_ = b.Execute(context.Background(), fail)
		}
		if err := b.Execute(context.Background(), succeed); err != nil {
			t.Fatalf("%s throttled a call: %v", mode, err)
		}
		if tr := b.Traffic(); tr.Requests != 6 || tr.Accepts != 1 {
			t.Fatalf("%s: Traffic() = %+v, still counted", mode, tr)
		}
	}
}

// A pod whose window holds fewer than MinimumThroughput requests judges the fleet's figures;
// from MinimumThroughput on, its own.
func TestThrottleFallsBackOnTheFleet(t *testing.T) {
	draw := 0.0
	b, _ := throttleFixture(t, Policy{FailureRatio: 1, MinimumThroughput: 20}, &draw)
	if err := b.Execute(context.Background(), succeed); err != nil {
		t.Fatalf("no fleet figures yet, own p 0: %v", err)
	}
	b.SetFleet(Fleet{Pods: 4, Requests: 100, Accepts: 25})
	p := throttleProbability(100, 25, 2) // 50/101
	draw = p - 1e-9
	if err := b.Execute(context.Background(), succeed); !errors.Is(err, ErrThrottled) {
		t.Fatalf("draw below the fleet's p %v: %v", p, err)
	}
	draw = p
	if err := b.Execute(context.Background(), succeed); err != nil {
		t.Fatalf("draw at the fleet's p: %v", err)
	}
	for b.Traffic().Requests < 20 {
		draw = 1
		_ = b.Execute(context.Background(), succeed)
	}
	draw = 0
	if err := b.Execute(context.Background(), succeed); err != nil {
		t.Fatalf("20 requests of its own, nearly all accepted: %v", err)
	}
}

// What SetFleet is told is made consistent: accepts are among the requests (issue 29).
func TestSetFleetKeepsAcceptsWithinRequests(t *testing.T) {
	b, err := New("b", Policy{Throttle: &Throttle{K: 2}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ in, want Fleet }{
		{Fleet{Pods: 3, Requests: 100, Accepts: 1_000_000}, Fleet{Pods: 3, Requests: 100, Accepts: 100}},
		{Fleet{Pods: -1, Requests: -5, Accepts: 7}, Fleet{}},
		{Fleet{Pods: 2, Requests: 100, Accepts: 25}, Fleet{Pods: 2, Requests: 100, Accepts: 25}},
		{Fleet{Pods: 2, Baseline: -time.Second}, Fleet{Pods: 2}},
		{Fleet{Pods: 2, Baseline: 40 * time.Millisecond}, Fleet{Pods: 2, Baseline: 40 * time.Millisecond}},
	} {
		b.SetFleet(tc.in)
		if got := b.Traffic().Fleet; got != tc.want {
			t.Errorf("SetFleet(%+v): Traffic().Fleet = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

// Update keeps the tally (re-cut for a new width, as the failure window is), and a breaker
// that loses both features stops counting.
func TestUpdateKeepsTheTally(t *testing.T) {
	draw := 1.0
	b, clk := throttleFixture(t, Policy{RetryBudget: &RetryBudget{Percent: 50}}, &draw)
	for range 4 {
		_ = b.Execute(context.Background(), succeed)
	}
	_ = b.Execute(context.Background(), fail)
	if !b.AllowRetry() {
		t.Fatal("retry refused with 5 first attempts at 50%")
	}
	want := Traffic{Requests: 5, Accepts: 4, Retries: 1}
	if tr := b.Traffic(); tr != want {
		t.Fatalf("Traffic() = %+v, want %+v", tr, want)
	}
	p := b.Policy()
	p.Throttle = &Throttle{K: 3}
	if err := b.Update(p); err != nil {
		t.Fatal(err)
	}
	if tr := b.Traffic(); tr != want {
		t.Fatalf("after a new k: %+v, want %+v", tr, want)
	}
	clk.Advance(10 * time.Second) // the tally's bucket is now the previous one
	p.Window = 20 * time.Second
	if err := b.Update(p); err != nil {
		t.Fatal(err)
	}
	if tr := b.Traffic(); tr != want {
		t.Fatalf("after a new width: %+v, want %+v", tr, want)
	}
	clk.Advance(40 * time.Second)
	if tr := b.Traffic(); tr != (Traffic{}) {
		t.Fatalf("two new-width windows later: %+v, want nothing", tr)
	}
	_ = b.Execute(context.Background(), succeed)
	p.RetryBudget, p.Throttle = nil, nil
	if err := b.Update(p); err != nil {
		t.Fatal(err)
	}
	if b.cur.Load().tally != nil {
		t.Fatal("still counting without a budget or throttling")
	}
}

// TestThrottleArmsWhenARollDropsSuccesses: throttling judges the window as it stands, also
// when no failure came since its last judgement: a bucket full of successes ageing out
// leaves the failures of the live one, and the next call is refused without any new
// failure having been recorded.
func TestThrottleArmsWhenARollDropsSuccesses(t *testing.T) {
	draw := 0.0 // refuse whenever the probability is above 0
	b, clk := throttleFixture(t, Policy{Window: time.Second, MinimumThroughput: 10, FailureRatio: 1}, &draw)
	ctx := context.Background()
	for range 40 {
		_ = b.Execute(ctx, succeed)
	}
	clk.Advance(time.Second) // the successes are the previous bucket now
	for range 10 {
		_ = b.Execute(ctx, func(context.Context) error { return errBoom })
	}
	// 50 requests, 40 accepts: healthy under k 2.
	if err := b.Execute(ctx, succeed); err != nil {
		t.Fatalf("a healthy window throttled: %v", err)
	}
	clk.Advance(time.Second) // the successes age out; the live bucket is empty, the failures previous
	if err := b.Execute(ctx, succeed); !errors.Is(err, ErrThrottled) {
		t.Fatalf("after the successes aged out: %v, want throttled", err)
	}
}
