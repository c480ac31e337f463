package breaker

import (
	"context"
	"errors"
	"testing"
	"time"
)

// budgetFixture is a breaker with a retry budget whose window never opens the circuit, on a
// fake clock aligned to its 10s buckets.
func budgetFixture(t *testing.T, rb RetryBudget) (*Breaker, interface{ Advance(time.Duration) }) {
	t.Helper()
	clk := newFakeClock()
	b, err := New("r", Policy{RetryBudget: &rb, Mode: ModeForcedClosed}, WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	return b, clk
}

// retriesAllowed takes retries until the budget refuses one, making each allowed retry as a
// call, and returns how many it allowed.
func retriesAllowed(t *testing.T, b *Breaker) int {
	t.Helper()
	n := 0
	for b.AllowRetry() {
		n++
		_ = b.Execute(context.Background(), fail)
		if n > 1e5 {
			t.Fatal("the budget never refuses")
		}
	}
	return n
}

// Over the window, retries ≤ Percent% of first attempts + MinPerSecond × span / pods, with
// pods 1 until SetFleet; the window is the live bucket and the one before, and its span is
// from the start of the one before (or from when counting began) to now.
func TestRetryBudgetArithmetic(t *testing.T) {
	b, clk := budgetFixture(t, RetryBudget{Percent: 20, MinPerSecond: 1})
	if n := retriesAllowed(t, b); n != 0 {
		t.Fatalf("nothing counted yet, nothing spanned: %d retries, want 0", n)
	}
	clk.Advance(10 * time.Second) // t = 10s: the window spans [0, 10s)
	if n := retriesAllowed(t, b); n != 10 {
		t.Fatalf("floor alone over 10s, pods unknown: %d retries, want 10", n)
	}
	clk.Advance(10 * time.Second) // t = 20s: [10s, 20s) holds those 10 retries
	if n := retriesAllowed(t, b); n != 0 {
		t.Fatalf("the floor's 10 for [10s, 20s] are spent: %d more, want 0", n)
	}
	clk.Advance(20 * time.Second) // t = 40s: an empty window spanning 10s
	b.SetFleet(Fleet{Pods: 4})
	for range 50 {
		_ = b.Execute(context.Background(), fail)
	}
	// 20% of 50 first attempts + 1/s × 10s / 4: 12.5, so 12. Retries are calls but not
	// first attempts, so making them does not raise the allowance.
	if n := retriesAllowed(t, b); n != 12 {
		t.Fatalf("50 first attempts, 4 pods: %d retries, want 12", n)
	}
	if tr := b.Traffic(); tr.Requests != 62 || tr.Retries != 12 {
		t.Fatalf("Traffic() = %+v, want 62 requests of which 12 retries", tr)
	}
	clk.Advance(5 * time.Second) // t = 45s: the span is 15s, the share 3.75
	if n := retriesAllowed(t, b); n != 1 {
		t.Fatalf("5s later: %d more retries, want 1", n)
	}
	clk.Advance(10 * time.Second) // t = 55s: [40s, 50s) is the bucket before
	for range 50 {
		_ = b.Execute(context.Background(), fail)
	}
	// 100 first attempts in the two buckets: 20 + 3.75 = 23.75, 13 taken.
	if n := retriesAllowed(t, b); n != 10 {
		t.Fatalf("100 first attempts over both buckets: %d more retries, want 10", n)
	}
	clk.Advance(20 * time.Second) // t = 75s: nothing in [60s, 75s]
	if n := retriesAllowed(t, b); n != 3 {
		t.Fatalf("empty window spanning 15s, 4 pods: %d retries, want 3", n)
	}
	b.SetFleet(Fleet{Pods: 200})
	clk.Advance(20 * time.Second)
	if n := retriesAllowed(t, b); n != 0 {
		t.Fatalf("a 200-pod fleet's floor share is 0.075 over 15s: %d retries", n)
	}
}

func TestAllowRetryWithoutBudgetAndWhileOpen(t *testing.T) {
	clk := newFakeClock()
	b, err := New("r", Policy{OpenTimeout: time.Second}, WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	for range 100 {
		if !b.AllowRetry() {
			t.Fatal("no budget, and a retry refused")
		}
	}
	b.Trip()
	if b.AllowRetry() {
		t.Fatal("retry allowed while open")
	}
	clk.Advance(time.Second)
	if !b.AllowRetry() {
		t.Fatal("half-open: the probe cap, not the budget, bounds retries")
	}
}

// generousBudget is a budget that a test's few retries never spend: 100 a second, over a
// window that has spanned a second.
func generousBudget(t *testing.T) *Breaker {
	b, clk := budgetFixture(t, RetryBudget{Percent: 100, MinPerSecond: 100})
	clk.Advance(time.Second)
	return b
}

type retryAfterErr struct{ d time.Duration }

func (e retryAfterErr) Error() string             { return "slow down" }
func (e retryAfterErr) RetryAfter() time.Duration { return e.d }

func TestRetryOutcomes(t *testing.T) {
	ctx := context.Background()
	t.Run("succeeds on the third attempt", func(t *testing.T) {
		b := generousBudget(t)
		n := 0
		err := Retry(ctx, b, 3, func(context.Context) error {
			if n++; n < 3 {
				return errBoom
			}
			return nil
		}, WithBackoff(0, 0))
		if err != nil || n != 3 {
			t.Fatalf("err %v after %d attempts", err, n)
		}
		if tr := b.Traffic(); tr.Requests != 3 || tr.Retries != 2 || tr.Accepts != 1 {
			t.Fatalf("Traffic() = %+v: retries are calls", tr)
		}
	})
	t.Run("refused by the budget wraps the last error", func(t *testing.T) {
		b, _ := budgetFixture(t, RetryBudget{})
		n := 0
		last := errors.New("attempt 1")
		err := Retry(ctx, b, 3, func(context.Context) error { n++; return last }, WithBackoff(0, 0))
		if n != 1 || !errors.Is(err, ErrRetryBudget) || !errors.Is(err, last) {
			t.Fatalf("%d attempts, err %v", n, err)
		}
	})
	t.Run("never while open", func(t *testing.T) {
		b, err := New("r", Policy{MinimumThroughput: 1, RetryBudget: &RetryBudget{Percent: 100, MinPerSecond: 100}})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		err = Retry(ctx, b, 3, func(context.Context) error { n++; return errBoom }, WithBackoff(0, 0))
		if n != 1 || !errors.Is(err, ErrOpen) || errors.Is(err, ErrRetryBudget) {
			t.Fatalf("%d attempts, err %v; want the open refusal after one", n, err)
		}
	})
	t.Run("not a failure is not retried", func(t *testing.T) {
		b, err := New("r", Policy{}, WithClassifier(func(err error) bool { return !errors.Is(err, errBenign) }))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		err = Retry(ctx, b, 3, func(context.Context) error { n++; return errBenign }, WithBackoff(0, 0))
		if n != 1 || !errors.Is(err, errBenign) {
			t.Fatalf("%d attempts, err %v", n, err)
		}
	})
	t.Run("attempts used up", func(t *testing.T) {
		b := generousBudget(t)
		n := 0
		err := Retry(ctx, b, 4, func(context.Context) error { n++; return errBoom }, WithBackoff(0, 0))
		if n != 4 || err != errBoom {
			t.Fatalf("%d attempts, err %v", n, err)
		}
	})
	t.Run("honours Retry-After", func(t *testing.T) {
		b := generousBudget(t)
		n := 0
		start := time.Now()
		// The 30ms the error asks for is used, not the hour's backoff: waiting that would
		// end with the context's deadline.
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		err := Retry(ctx, b, 2, func(context.Context) error {
			if n++; n == 1 {
				return retryAfterErr{30 * time.Millisecond}
			}
			return nil
		}, WithBackoff(time.Hour, time.Hour))
		if el := time.Since(start); err != nil || n != 2 || el < 30*time.Millisecond {
			t.Fatalf("%d attempts, err %v after %v; want the second attempt's success after the 30ms asked for", n, err, el)
		}
	})
	t.Run("a Retry-After beyond the limit ends the retries", func(t *testing.T) {
		b := generousBudget(t)
		n := 0
		want := retryAfterErr{maxRetryAfter + time.Millisecond}
		err := Retry(ctx, b, 3, func(context.Context) error { n++; return want })
		if n != 1 || err != want {
			t.Fatalf("%d attempts, err %v", n, err)
		}
	})
	t.Run("cancelled during backoff", func(t *testing.T) {
		b := generousBudget(t)
		ctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(20*time.Millisecond, cancel)
		n := 0
		done := make(chan error, 1)
		go func() {
			done <- Retry(ctx, b, 3, func(context.Context) error { n++; return errBoom }, WithBackoff(time.Hour, time.Hour))
		}()
		// The cancellation ends the hour's backoff; the bound only turns a Retry that
		// sleeps through it into a failure rather than a hung test.
		select {
		case err := <-done:
			if n != 1 || !errors.Is(err, context.Canceled) || !errors.Is(err, errBoom) {
				t.Fatalf("%d attempts, err %v", n, err)
			}
		case <-time.After(time.Minute):
			t.Fatal("Retry still in its backoff a minute after its context was cancelled")
		}
	})
}

func TestBackoffBounds(t *testing.T) {
	for _, tc := range []struct {
		n         int
		base, cap time.Duration
		lo, hi    time.Duration
	}{
		{1, 50 * time.Millisecond, 2 * time.Second, 0, 50 * time.Millisecond},
		{3, 50 * time.Millisecond, 2 * time.Second, 0, 200 * time.Millisecond},
		{40, 50 * time.Millisecond, 2 * time.Second, 0, 2 * time.Second},
		{1000, 50 * time.Millisecond, 2 * time.Second, 0, 2 * time.Second},
		{5, 0, 0, 0, 0},
		{2, time.Second, 0, 0, time.Second}, // a cap below the base is the base
	} {
		o := retryOptions{base: tc.base, cap: tc.cap}
		var lo, hi time.Duration = 1 << 62, -1
		for range 20000 {
			d := o.backoff(tc.n)
			lo, hi = min(lo, d), max(hi, d)
		}
		if lo < tc.lo || hi > tc.hi {
			t.Errorf("%+v: waits in [%v, %v], want within [%v, %v]", tc, lo, hi, tc.lo, tc.hi)
		}
		// The draws spread over the range: the extremes come within 5% of its ends.
		if slack := (tc.hi - tc.lo) / 20; lo > tc.lo+slack || hi < tc.hi-slack {
			t.Errorf("%+v: waits in [%v, %v] do not cover [%v, %v]", tc, lo, hi, tc.lo, tc.hi)
		}
	}
}
