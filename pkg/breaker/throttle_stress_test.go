package breaker

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
)

// Goroutines retrying and calling through a throttling, budgeted breaker while others
// update its policy and its fleet: under -race, and with a clock that does not move, the
// tally must count every request, success and throttling exactly once.
func TestStressThrottleAndRetries(t *testing.T) {
	for _, observed := range []bool{false, true} {
		clk := newFakeClock()
		opts := []Option{WithClock(clk)}
		if observed {
			opts = append(opts, WithObserver(&countingObserver{}))
		}
		// A third of the attempts succeed: with k at most 2 throttling rejects some calls
		// whatever the updater last set, and the circuit (opening only on a window of
		// failures alone) stays closed.
		p := Policy{FailureRatio: 1, MinimumThroughput: 200, RetryBudget: &RetryBudget{Percent: 30, MinPerSecond: 5}, Throttle: &Throttle{K: 1.5}}
		b, err := New("stress", p, opts...)
		if err != nil {
			t.Fatal(err)
		}
		var runs, successes, throttled, retriesMade atomic.Int64
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(g), 22))
				for range 3000 {
					attempts := 0
					fn := func(context.Context) error {
						runs.Add(1)
						if attempts++; r.IntN(3) == 0 {
							successes.Add(1)
							return nil
						}
						return errBoom
					}
					err := Retry(context.Background(), b, 3, fn, WithBackoff(0, 0))
					if errors.Is(err, ErrThrottled) {
						throttled.Add(1)
					}
					retriesMade.Add(int64(max(attempts-1, 0)))
				}
			}()
		}
		var updater sync.WaitGroup
		updater.Add(1)
		go func() {
			defer updater.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				q := p
				q.Throttle = &Throttle{K: 1.5 + float64(i%2)/2}
				if err := b.Update(q); err != nil {
					t.Error(err)
				}
				b.SetFleet(Fleet{Pods: 1 + i%5, Requests: int64(i), Accepts: int64(i / 2)})
				_ = b.Traffic()
			}
		}()
		wg.Wait()
		close(stop)
		updater.Wait()
		tr := b.Traffic()
		if tr.Requests != runs.Load()+throttled.Load() || tr.Accepts != successes.Load() || tr.Throttled != throttled.Load() {
			t.Fatalf("observed=%v: Traffic() = %+v; the callers counted %d runs, %d successes, %d throttled",
				observed, tr, runs.Load(), successes.Load(), throttled.Load())
		}
		if tr.Retries < retriesMade.Load() || tr.Throttled == 0 || tr.Retries == 0 {
			t.Fatalf("observed=%v: Traffic() = %+v, %d retries made", observed, tr, retriesMade.Load())
		}
		// The budget held: retries ≤ 30% of first attempts + the floor (5/s × 10s).
		if first := tr.Requests - tr.Throttled - tr.Retries; float64(tr.Retries) > 0.3*float64(first)+50 {
			t.Fatalf("observed=%v: %d retries over %d first attempts", observed, tr.Retries, first)
		}
	}
}
