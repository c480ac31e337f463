package breaker

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestConcurrencyLimitStress runs 32 goroutines through Execute, Allow and Call against a
// limit of 4, some waiting for a slot, while the limit, the adaptive limiter and the
// circuit change under them. It checks that no more calls than the highest limit set ever
// run at once, and that every slot is given back. Run it with -race.
func TestConcurrencyLimitStress(t *testing.T) {
	for _, observed := range []bool{false, true} {
		p := testPolicy()
		p.MaxInFlight, p.MaxWait, p.MinimumThroughput = 4, time.Millisecond, 1000
		p.OpenTimeout, p.HalfOpenPermittedCalls = time.Millisecond, 2 // Trip sends calls through half-open probes
		var running, most atomic.Int64
		var limited atomic.Int64
		b, err := New("stress", p, stressObserver(observed)...)
		if err != nil {
			t.Fatal(err)
		}
		fn := func(context.Context) error {
			n := running.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(200 * time.Microsecond)
			running.Add(-1)
			return nil
		}
		var wg sync.WaitGroup
		for g := range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 100 {
					var err error
					switch (g + i) % 3 {
					case 0:
						err = b.Execute(context.Background(), fn)
					case 1:
						var done func(error)
						if done, err = b.Allow(); err == nil {
							done(fn(context.Background()))
						}
					case 2:
						_, err = Call(context.Background(), b, Callbacks[int]{Closed: func(ctx context.Context) (int, error) { return 0, fn(ctx) }})
					}
					switch {
					case errors.Is(err, ErrConcurrencyLimited):
						limited.Add(1)
					case err != nil && !errors.Is(err, ErrOpen):
						t.Errorf("unexpected error %v", err)
					}
				}
			}()
		}
		finished := make(chan struct{})
		go func() { wg.Wait(); close(finished) }()
		for i := 0; ; i++ {
			select {
			case <-finished:
			default:
				q := p
				q.MaxInFlight = 2 + i%3 // 2, 3 or 4: never above 4
				if i%2 == 0 {
					q.Adaptive = &AdaptiveConcurrency{}
				}
				if i%50 == 25 {
					b.Trip()
				}
				if err := b.Update(q); err != nil {
					t.Fatal(err)
				}
				time.Sleep(200 * time.Microsecond)
				continue
			}
			break
		}
		if m := most.Load(); m > 4 {
			t.Errorf("observed %v: %d calls ran at once under limits of at most 4", observed, m)
		}
		if n := b.lim.inFlight(); n != 0 {
			t.Errorf("observed %v: %d slots taken after every call ended", observed, n)
		}
		if limited.Load() == 0 {
			t.Errorf("observed %v: 32 goroutines never met a limit of 4", observed)
		}
		t.Logf("observed %v: at most %d at once, %d refused by the limit", observed, most.Load(), limited.Load())
	}
}

func stressObserver(observed bool) []Option {
	if observed {
		return []Option{WithObserver(&countingObserver{})}
	}
	return nil
}
