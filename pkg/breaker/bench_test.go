package breaker

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func benchBreaker(b *testing.B) *Breaker {
	p := DefaultPolicy()
	br, err := New("bench", p)
	if err != nil {
		b.Fatal(err)
	}
	return br
}

func succeed(context.Context) error { return nil }

// floorFn is read through a variable so that the compiler cannot see which function it is:
// the call stays indirect, as the protected function's call in Execute is.
var floorFn = succeed

// BenchmarkFloor is what no breaker can go below: the protected function's indirect call
// and one uncontended atomic add. The closed and open paths are judged as multiples of it,
// measured in the same run (docs/benchmarks.md).
func BenchmarkFloor(b *testing.B) {
	var n atomic.Int64
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_ = floorFn(ctx)
		n.Add(1)
	}
}

func BenchmarkExecuteClosed(b *testing.B) {
	br := benchBreaker(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_ = br.Execute(ctx, succeed)
	}
}

// BenchmarkExecuteClosedSlowCalls times every call for slow-call judging (§5.13): on the
// coarse clock for a SlowCallDuration of 100ms or more, on the exact clock below that.
func BenchmarkExecuteClosedSlowCalls(b *testing.B) {
	for _, d := range []time.Duration{2 * time.Second, 10 * time.Millisecond} {
		b.Run(d.String(), func(b *testing.B) {
			p := DefaultPolicy()
			p.SlowCallDuration = d
			br, err := New("bench", p)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				_ = br.Execute(ctx, succeed)
			}
		})
	}
}

// BenchmarkExecuteOpenBackedOff is the open short-circuit of a circuit in its third
// backed-off open period.
func BenchmarkExecuteOpenBackedOff(b *testing.B) {
	p := DefaultPolicy()
	p.MaxOpenTimeout = time.Hour
	br, err := New("bench", p)
	if err != nil {
		b.Fatal(err)
	}
	// Trip on an open circuit restarts its period without backing off: the third period
	// comes from a verdict that says so.
	br.Adopt(Verdict{State: Open, Since: time.Now(), ConsecutiveOpens: 3})
	if d, _ := br.RetryAfter(); d < 100*time.Second {
		b.Fatalf("third open period lasts %v, want 2m0s", d)
	}
	ctx := context.Background()
	b.ReportAllocs()
	var e error
	for b.Loop() {
		e = br.Execute(ctx, succeed)
	}
	if !errors.Is(e, ErrOpen) {
		b.Fatal(e)
	}
}

func BenchmarkAllowClosed(b *testing.B) {
	br := benchBreaker(b)
	b.ReportAllocs()
	for b.Loop() {
		done, err := br.Allow()
		if err == nil {
			done(nil)
		}
	}
}

func BenchmarkExecuteClosedParallel(b *testing.B) {
	br := benchBreaker(b)
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_ = br.Execute(ctx, succeed)
		}
	})
}

func BenchmarkExecuteOpen(b *testing.B) {
	br := benchBreaker(b)
	br.Trip()
	ctx := context.Background()
	b.ReportAllocs()
	var err error
	for b.Loop() {
		err = br.Execute(ctx, succeed)
	}
	if !errors.Is(err, ErrOpen) {
		b.Fatal(err)
	}
}

func BenchmarkCallClosed(b *testing.B) {
	br := benchBreaker(b)
	ctx := context.Background()
	cb := Callbacks[int]{Closed: func(context.Context) (int, error) { return 1, nil }}
	b.ReportAllocs()
	for b.Loop() {
		_, _ = Call(ctx, br, cb)
	}
}

func BenchmarkExecute10PctFailures(b *testing.B) {
	br := benchBreaker(b)
	ctx := context.Background()
	i := 0
	fn := func(context.Context) error {
		i++
		if i%10 == 0 {
			return errBench
		}
		return nil
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = br.Execute(ctx, fn)
	}
	if br.State() != Closed {
		b.Fatal("a 10% failure rate opened a 50% breaker")
	}
}

func BenchmarkAllowOpen(b *testing.B) {
	br := benchBreaker(b)
	br.Trip()
	b.ReportAllocs()
	var err error
	for b.Loop() {
		_, err = br.Allow()
	}
	if !errors.Is(err, ErrOpen) {
		b.Fatal(err)
	}
}

func BenchmarkAllowClosedParallel(b *testing.B) {
	br := benchBreaker(b)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if done, err := br.Allow(); err == nil {
				done(nil)
			}
		}
	})
}

var errBench = errors.New("bench failure")

// BenchmarkExecuteClosedThrottled is closed Execute with adaptive throttling configured
// (§5.16) and a healthy window, so every call is counted and judged and none rejected: the
// cost of the decision, against BenchmarkExecuteClosed in the same run.
func BenchmarkExecuteClosedThrottled(b *testing.B) {
	p := DefaultPolicy()
	p.Throttle = &Throttle{K: 2}
	br, err := New("bench", p)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := br.Execute(ctx, succeed); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkExecuteClosedBudgeted is closed Execute with a retry budget configured (§5.15):
// the counting of first attempts.
func BenchmarkExecuteClosedBudgeted(b *testing.B) {
	p := DefaultPolicy()
	p.RetryBudget = &RetryBudget{Percent: 20, MinPerSecond: 10}
	br, err := New("bench", p)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_ = br.Execute(ctx, succeed)
	}
}

// BenchmarkAllowRetry is the budget check alone (§5.15), on a window of first attempts whose
// budget is spent: the check a caller makes before each retry.
func BenchmarkAllowRetry(b *testing.B) {
	p := DefaultPolicy()
	p.RetryBudget = &RetryBudget{Percent: 20, MinPerSecond: 10}
	br, err := New("bench", p)
	if err != nil {
		b.Fatal(err)
	}
	for range 100 {
		_ = br.Execute(context.Background(), succeed)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = br.AllowRetry()
	}
}

// BenchmarkExecuteClosedWithCandidate is BenchmarkExecuteClosed with a candidate policy
// judged in shadow (§11), both circuits closed: one more lock-free window add, the
// candidate's, and no allocation.
func BenchmarkExecuteClosedWithCandidate(b *testing.B) {
	br := benchBreaker(b)
	c := DefaultPolicy()
	c.FailureRatio = 0.2
	if err := br.SetCandidate(&c); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_ = br.Execute(ctx, succeed)
	}
}

// BenchmarkAllowClosedWithCandidate: the two-step form hands out a closure holding both
// tickets, one allocation per admitted call.
func BenchmarkAllowClosedWithCandidate(b *testing.B) {
	br := benchBreaker(b)
	c := DefaultPolicy()
	if err := br.SetCandidate(&c); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		done, err := br.Allow()
		if err == nil {
			done(nil)
		}
	}
}
