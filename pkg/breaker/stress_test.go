package breaker

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/observe"
)

// TestStress runs 64 goroutines against one breaker with a flaky function while the clock
// jumps and the policy changes under them, and some callers drop their done (a leaked
// call). It checks that the probes admitted in one half-open period never exceed the cap,
// leaked ones included, that every admitted call is accounted for exactly once, and that
// leaked probes do not wedge the breaker: at the end, successful calls close it within a
// few open timeouts. Run it with -race.
func TestStress(t *testing.T) {
	for _, observed := range []bool{true, false} {
		name := "lock-free path"
		if observed {
			name = "with a CallObserver"
		}
		t.Run(name, func(t *testing.T) { stress(t, observed) })
	}
}

type countingObserver struct {
	starts, ends, rejected, ignored, recorded atomic.Int64
	leakReopens                               atomic.Int64
}

func (c *countingObserver) OnTransition(t observe.Transition) {
	if t.From == HalfOpen && t.To == Open && t.Reason == breakerconfig.ReasonTimedOut {
		c.leakReopens.Add(1)
	}
}
func (c *countingObserver) OnCallStart(string, State)    { c.starts.Add(1) }
func (c *countingObserver) OnFallback(observe.CallEvent) {}
func (c *countingObserver) OnRetry(string, bool)         {}
func (c *countingObserver) OnCallEnd(e observe.CallEvent) {
	switch e.Outcome {
	case observe.OutcomeRejected:
		c.rejected.Add(1)
		return
	case observe.OutcomeIgnored:
		c.ignored.Add(1)
	default:
		c.recorded.Add(1)
	}
	c.ends.Add(1)
}

func stress(t *testing.T, observed bool) {
	const goroutines = 64
	iterations := 2000
	if testing.Short() {
		iterations = 200
	}
	clock := newFakeClock()
	p := Policy{OpenTimeout: 50 * time.Millisecond, Window: 20 * time.Millisecond, FailureRatio: 0.3, MinimumThroughput: 5, SuccessThreshold: 3, HalfOpenPermittedCalls: 2}
	obs := &countingObserver{}
	opts := []Option{WithClock(clock)}
	if observed {
		opts = append(opts, WithObserver(obs))
	}
	b, err := New("stress", p, opts...)
	if err != nil {
		t.Fatal(err)
	}

	var (
		mu       sync.Mutex
		probes   = map[uint64]int{} // probes running, per half-open period
		admitted atomic.Int64
		finished atomic.Int64
		dropped  atomic.Int64 // admitted, and their done never called
	)
	probeStart := func(gen uint64) {
		mu.Lock()
		defer mu.Unlock()
		probes[gen]++
		if n := probes[gen]; n > p.HalfOpenPermittedCalls {
			t.Errorf("%d probes in flight in period %d, cap %d", n, gen, p.HalfOpenPermittedCalls)
		}
	}
	probeEnd := func(gen uint64) {
		mu.Lock()
		probes[gen]--
		mu.Unlock()
	}
	flaky := func(r *rand.Rand) error {
		if r.IntN(4) == 0 {
			// Some calls take a while, so that probes overlap.
			time.Sleep(time.Duration(r.IntN(50)) * time.Microsecond)
		}
		switch k := r.IntN(100); {
		case k < 20:
			return errBoom
		case k < 23:
			return context.Canceled
		case k < 25:
			panic("flaky")
		}
		return nil
	}

	// The clock and the policy move under the calls, moved by the callers themselves so that
	// time passes at the pace calls are made whatever the scheduler does.
	disturb := func(r *rand.Rand) {
		clock.Advance(time.Duration(r.IntN(200)) * time.Microsecond)
		switch r.IntN(1000) {
		case 0:
			b.Trip()
		case 1:
			q := p
			q.Mode = []Mode{ModeEnforce, ModeMetricsOnly, ModeForcedOpen, ModeForcedClosed}[r.IntN(4)]
			_ = b.Update(q)
		case 2, 3, 4, 5:
			_ = b.Update(p)
		case 6:
			b.Adopt(Verdict{State: State(r.IntN(3)), Since: clock.Now()})
		}
	}
	var callers sync.WaitGroup
	for g := range goroutines {
		callers.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 7))
			for range iterations {
				switch r.IntN(6) {
				case 0, 1, 2: // the internal two-step form, to see which period a probe belongs to
					tk, err := b.admit(context.Background())
					if err != nil {
						if !errors.Is(err, ErrOpen) {
							t.Errorf("refusal %v does not match ErrOpen", err)
						}
						continue
					}
					admitted.Add(1)
					probe := tk.recorded && tk.p.state == HalfOpen
					if probe {
						probeStart(tk.p.gen)
					}
					if r.IntN(40) == 0 {
						// Leaked: the call never reports, and a probe never frees its slot
						// (probeEnd is not called either), so the cap check above sees it.
						dropped.Add(1)
						continue
					}
					func() {
						defer func() {
							finished.Add(1)
							if r := recover(); r != nil && r != "flaky" {
								panic(r)
							}
						}()
						_ = runTicketErr(b, tk, func() error {
							// The probe ends here, before the breaker frees its slot:
							// counting the end after runTicketErr returned would let the
							// next probe of the period start first and look like a fourth.
							if probe {
								defer probeEnd(tk.p.gen)
							}
							return flaky(r)
						})
					}()
				case 3:
					done, err := b.Allow()
					if err != nil {
						continue
					}
					admitted.Add(1)
					if r.IntN(40) == 0 {
						dropped.Add(1)
						continue
					}
					e := flaky0(r)
					done(e)
					finished.Add(1)
				case 4:
					func() {
						defer func() {
							if r := recover(); r != nil && r != "flaky" {
								panic(r)
							}
						}()
						_ = b.Execute(context.Background(), func(context.Context) error { admitted.Add(1); finished.Add(1); return flaky(r) })
					}()
				default:
					_, _ = Call(context.Background(), b, Callbacks[int]{
						Closed:   func(context.Context) (int, error) { admitted.Add(1); finished.Add(1); return 0, flaky0(r) },
						HalfOpen: func(context.Context) (int, error) { admitted.Add(1); finished.Add(1); return 0, flaky0(r) },
						Open:     func(context.Context, error) (int, error) { return 1, nil },
					})
				}
				disturb(r)
				if r.IntN(50) == 0 {
					_ = b.State()
					_ = b.Counts()
					_ = b.Verdict()
				}
			}
		})
	}
	callers.Wait()

	if admitted.Load() != finished.Load()+dropped.Load() {
		t.Fatalf("admitted %d, finished %d, dropped %d", admitted.Load(), finished.Load(), dropped.Load())
	}
	if observed {
		if obs.starts.Load() != admitted.Load() || obs.ends.Load() != admitted.Load()-dropped.Load() {
			t.Fatalf("observer: %d starts, %d ends, for %d admitted calls of which %d dropped", obs.starts.Load(), obs.ends.Load(), admitted.Load(), dropped.Load())
		}
		if obs.recorded.Load()+obs.ignored.Load() != admitted.Load()-dropped.Load() {
			t.Fatalf("outcomes: %d recorded + %d ignored != %d admitted - %d dropped", obs.recorded.Load(), obs.ignored.Load(), admitted.Load(), dropped.Load())
		}
		t.Logf("%d admitted (%d recorded, %d ignored, %d dropped), %d rejected, %d re-opens by leaked probes",
			admitted.Load(), obs.recorded.Load(), obs.ignored.Load(), dropped.Load(), obs.rejected.Load(), obs.leakReopens.Load())
	}
	// Whatever the dropped dones left behind, the breaker is not wedged: back in Enforce,
	// successful calls close it within a few open timeouts.
	if err := b.Update(p); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if b.State() == Closed {
			break
		}
		clock.Advance(p.OpenTimeout)
		for range p.SuccessThreshold {
			if done, err := b.Allow(); err == nil {
				done(nil)
			}
		}
	}
	if s := b.State(); s != Closed {
		t.Fatalf("wedged: %v after four open timeouts of successful calls, %+v", s, b.Counts())
	}
	b.mu.Lock()
	inflight := b.probesInFlight
	b.mu.Unlock()
	if inflight != 0 {
		t.Fatalf("%d probe slots still held after closing", inflight)
	}
	if c := b.Counts(); c.Calls < 0 || c.Failures < 0 || c.Failures > c.Calls {
		t.Fatalf("Counts = %+v", c)
	}
}

// flaky0 is flaky without panics, for the forms whose callers cannot report one.
func flaky0(r *rand.Rand) error {
	if r.IntN(100) < 20 {
		return errBoom
	}
	return nil
}

func runTicketErr(b *Breaker, t ticket, fn func() error) error {
	_, _, err := runTicket(context.Background(), b, t, func(context.Context) (struct{}, error) { return struct{}{}, fn() })
	return err
}
