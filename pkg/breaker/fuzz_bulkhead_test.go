package breaker

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker/internal/fakeclock"
)

// FuzzConcurrencyPolicy checks that Validate accepts exactly the meaningful concurrency
// limits, and that on any accepted one, whatever the latencies and the fleet's baseline,
// the limit in force stays within [min(MinLimit, MaxInFlight), MaxInFlight] and every
// slot taken is given back.
func FuzzConcurrencyPolicy(f *testing.F) {
	f.Add(5, int64(0), 1.5, 1, true, int64(10*time.Millisecond), int64(0))
	f.Add(1, int64(time.Second), 0.0, 0, true, int64(time.Hour), int64(time.Millisecond))
	f.Add(-1, int64(-1), 0.5, -1, true, int64(-5), int64(-5))
	f.Add(1<<40, int64(0), math.Inf(1), 1<<30, true, int64(1), int64(math.MaxInt64))
	f.Add(3, int64(0), math.NaN(), 2, false, int64(0), int64(0))
	f.Fuzz(func(t *testing.T, maxInFlight int, maxWait int64, tolerance float64, minLimit int, adaptive bool, latency, fleet int64) {
		p := DefaultPolicy()
		p.MaxInFlight, p.MaxWait = maxInFlight, time.Duration(maxWait)
		if adaptive {
			p.Adaptive = &AdaptiveConcurrency{Tolerance: tolerance, MinLimit: minLimit}
		}
		valid := maxInFlight >= 0 && maxWait >= 0 &&
			(!adaptive || (tolerance == 0 || tolerance >= 1 && !math.IsInf(tolerance, 1)) && minLimit >= 0)
		if err := p.Validate(); valid != (err == nil) {
			t.Fatalf("Validate(%+v, %+v) = %v, want valid=%v", p, p.Adaptive, err, valid)
		}
		if !valid {
			return
		}
		p.MaxWait = 0 // the run below never waits on the real clock
		clock := fakeclock.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		b, err := New("fuzz", p, WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		b.SetFleet(Fleet{Baseline: time.Duration(fleet)})
		ceiling := min(int64(maxInFlight), maxCounted)
		floor := ceiling
		if adaptive {
			floor = min(int64(max(minLimit, 1)), ceiling)
		}
		step := time.Duration(min(max(latency, 0), int64(time.Hour)))
		for i := range 300 {
			var dones []func(error)
			for range 3 {
				if done, err := b.Allow(); err == nil {
					dones = append(dones, done)
				}
			}
			clock.Advance(step/time.Duration(i%7+1) + time.Millisecond)
			for _, d := range dones {
				d(nil)
			}
			if l := int64(b.Traffic().Limit); maxInFlight > 0 && (l < floor || l > ceiling) {
				t.Fatalf("limit %d outside [%d, %d]", l, floor, ceiling)
			}
		}
		_ = b.Execute(context.Background(), func(context.Context) error { return nil })
		if b.lim != nil && b.lim.inFlight() != 0 {
			t.Fatalf("%d slots taken after every call ended", b.lim.inFlight())
		}
	})
}
