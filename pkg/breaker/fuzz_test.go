package breaker

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker/internal/fakeclock"
)

// FuzzPolicyValidate checks that Validate accepts exactly the meaningful policies, that
// every refusal names a field, and that a breaker on any accepted policy, however extreme
// its durations, works at any clock reading without panicking.
func FuzzPolicyValidate(f *testing.F) {
	f.Add(int64(30*time.Second), int64(10*time.Second), 0.5, 20, 2, 1, "Enforce", int64(0))
	f.Add(int64(1), int64(1), 1.0, 1, 1, 1, "", int64(-1))
	f.Add(int64(math.MaxInt64), int64(math.MaxInt64), 1e-300, math.MaxInt, math.MaxInt, math.MaxInt, "ForcedOpen", int64(math.MaxInt64))
	f.Add(int64(0), int64(-1), math.NaN(), 0, -1, 0, "enforce", int64(math.MinInt64))
	f.Add(int64(time.Second), int64(time.Hour), math.Inf(1), 5, 2, 1, "MetricsOnly", int64(1e18))
	f.Fuzz(func(t *testing.T, timeout, window int64, ratio float64, minimum, threshold, probes int, mode string, clockAt int64) {
		p := Policy{
			OpenTimeout:            time.Duration(timeout),
			Window:                 time.Duration(window),
			FailureRatio:           ratio,
			MinimumThroughput:      minimum,
			SuccessThreshold:       threshold,
			HalfOpenPermittedCalls: probes,
			Mode:                   Mode(mode),
		}
		valid := timeout > 0 && window > 0 && ratio > 0 && ratio <= 1 && minimum >= 1 && threshold >= 1 && probes >= 1 &&
			(mode == "" || mode == "Enforce" || mode == "MetricsOnly" || mode == "ForcedOpen" || mode == "ForcedClosed")
		err := p.Validate()
		if valid != (err == nil) {
			t.Fatalf("Validate(%+v) = %v, want valid=%v", p, err, valid)
		}
		clock := fakeclock.NewClock(time.Unix(0, clockAt))
		b, nerr := New("fuzz", p, WithClock(clock))
		if !valid {
			if _, ok := errors.AsType[*fieldError](err); !ok {
				t.Fatalf("refusal %v names no field", err)
			}
			if nerr == nil {
				t.Fatal("New accepted an invalid policy")
			}
			return
		}
		if nerr != nil {
			t.Fatal(nerr)
		}
		for i := range 50 {
			err := error(nil)
			if i%3 != 0 {
				err = errBoom
			}
			_ = b.Execute(context.Background(), func(context.Context) error { return err })
			clock.Advance(time.Duration(i) * time.Second)
			_ = b.State()
		}
		b.Trip()
		_ = b.Update(DefaultPolicy())
		if err := b.Update(p); err != nil {
			t.Fatal(err)
		}
		if c := b.Counts(); c.Calls < 0 || c.Failures < 0 || c.Failures > c.Calls {
			t.Fatalf("Counts = %+v", c)
		}
	})
}
