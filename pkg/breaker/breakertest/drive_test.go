package breakertest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakertest"
)

var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// newBreaker returns a breaker on a fake clock with a Recorder, its policy the default
// changed by mutate.
func newBreaker(t *testing.T, mutate func(*breaker.Policy), opts ...breaker.Option) (*breaker.Breaker, *breakertest.Clock, *breakertest.Recorder) {
	t.Helper()
	p := breaker.DefaultPolicy()
	if mutate != nil {
		mutate(&p)
	}
	clock := breakertest.NewClock(start)
	rec := &breakertest.Recorder{}
	b, err := breaker.New("dep", p, append([]breaker.Option{breaker.WithClock(clock), breaker.WithObserver(rec)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return b, clock, rec
}

func wantState(t *testing.T, b *breaker.Breaker, want breaker.State) {
	t.Helper()
	if s := b.State(); s != want {
		t.Fatalf("state %v, want %v", s, want)
	}
}

func wantUnreachable(t *testing.T, err error, mention string) {
	t.Helper()
	if !errors.Is(err, breakertest.ErrUnreachable) {
		t.Fatalf("err = %v, want one matching ErrUnreachable", err)
	}
	if !strings.Contains(err.Error(), mention) {
		t.Fatalf("err = %q, want it to mention %q", err, mention)
	}
}

func TestOpenTrips(t *testing.T) {
	b, _, rec := newBreaker(t, nil)
	if err := breakertest.Open(b); err != nil {
		t.Fatal(err)
	}
	wantState(t, b, breaker.Open)
	if last, _ := rec.Last(); last.Reason != breakerconfig.ReasonManual {
		t.Fatalf("reason %v, want %s", last.Reason, breakerconfig.ReasonManual)
	}
	// Already open: nothing more happens, the open period runs on.
	if err := breakertest.Open(b); err != nil {
		t.Fatal(err)
	}
	rec.AssertStates(t, "closed→open")
}

func TestOpenFromHalfOpen(t *testing.T) {
	b, clock, rec := newBreaker(t, nil)
	if err := breakertest.HalfOpen(b, clock); err != nil {
		t.Fatal(err)
	}
	if err := breakertest.Open(b); err != nil {
		t.Fatal(err)
	}
	rec.AssertStates(t, "closed→open", "open→half_open", "half_open→open")
}

func TestOpenByFailuresMakesJustEnoughCalls(t *testing.T) {
	for _, tc := range []struct {
		name                string
		ratio               float64
		minimum             int
		successes, failures int // in the window beforehand
		wantFailed          int // failed calls OpenByFailures must make
	}{
		{"empty window", 0.5, 20, 0, 0, 20},
		{"minimum throughput dominates", 0.5, 20, 5, 0, 15},
		{"ratio dominates", 0.5, 4, 10, 0, 10},
		{"failures already there", 0.5, 4, 3, 2, 1},
		{"uneven ratio", 0.6, 1, 7, 0, 11}, // 11/18 ≥ 0.6 > 10/17
		{"ratio 1 on failures only", 1, 3, 0, 1, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, _, rec := newBreaker(t, func(p *breaker.Policy) {
				p.FailureRatio, p.MinimumThroughput = tc.ratio, tc.minimum
			}, breaker.WithClassifier(func(err error) bool { return !errors.Is(err, errBenign) }))
			for range tc.successes {
				_ = b.Execute(context.Background(), func(context.Context) error { return nil })
			}
			for range tc.failures {
				_ = b.Execute(context.Background(), func(context.Context) error { return errBoom })
			}
			wantState(t, b, breaker.Closed)
			before := b.Counts()
			if err := breakertest.OpenByFailures(b, errBoom); err != nil {
				t.Fatal(err)
			}
			wantState(t, b, breaker.Open)
			last, _ := rec.Last()
			if last.Reason != breakerconfig.ReasonTripped || last.Trigger != breakerconfig.TriggerFailureRate || !errors.Is(last.Err, errBoom) {
				t.Fatalf("opened by %v/%v with %v, want Tripped/FailureRate with %v", last.Reason, last.Trigger, last.Err, errBoom)
			}
			if got := last.Counts.Failures - before.Failures; got != int64(tc.wantFailed) {
				t.Fatalf("made %d failed calls, want %d (opened on %+v)", got, tc.wantFailed, last.Counts)
			}
		})
	}
}

func TestOpenByFailuresRefusesWhatCannotOpen(t *testing.T) {
	t.Run("ratio 1 with successes", func(t *testing.T) {
		b, _, _ := newBreaker(t, func(p *breaker.Policy) { p.FailureRatio = 1 })
		_ = b.Execute(context.Background(), func(context.Context) error { return nil })
		wantUnreachable(t, breakertest.OpenByFailures(b, nil), "age out")
		if c := b.Counts(); c.Calls != 1 {
			t.Fatalf("made calls it knew were useless: %+v", c)
		}
	})
	t.Run("classifier", func(t *testing.T) {
		b, _, _ := newBreaker(t, nil, breaker.WithClassifier(func(err error) bool { return !errors.Is(err, errBenign) }))
		wantUnreachable(t, breakertest.OpenByFailures(b, errBenign), "classifier")
		if c := b.Counts(); c.Calls != 1 {
			t.Fatalf("went on after the first call: %+v", c)
		}
	})
	t.Run("forced closed", func(t *testing.T) {
		b, _, rec := newBreaker(t, func(p *breaker.Policy) { p.Mode = breaker.ModeForcedClosed })
		wantUnreachable(t, breakertest.OpenByFailures(b, nil), "ModeForcedClosed")
		wantUnreachable(t, breakertest.Open(b), "ModeForcedClosed")
		wantUnreachable(t, breakertest.HalfOpen(b, nil), "ModeForcedClosed")
		rec.AssertStates(t)
	})
	t.Run("probe slot taken", func(t *testing.T) {
		b, clock, _ := newBreaker(t, nil)
		if err := breakertest.HalfOpen(b, clock); err != nil {
			t.Fatal(err)
		}
		done, err := b.Allow()
		if err != nil {
			t.Fatal(err)
		}
		defer done(nil)
		wantUnreachable(t, breakertest.OpenByFailures(b, nil), "probe was refused")
	})
}

func TestOpenByFailuresFromHalfOpenFailsOneProbe(t *testing.T) {
	b, clock, rec := newBreaker(t, nil)
	if err := breakertest.HalfOpen(b, clock); err != nil {
		t.Fatal(err)
	}
	if err := breakertest.OpenByFailures(b, nil); err != nil {
		t.Fatal(err)
	}
	rec.AssertStates(t, "closed→open", "open→half_open", "half_open→open")
	last, _ := rec.Last()
	if last.Trigger != breakerconfig.TriggerFailedProbe || !errors.Is(last.Err, breakertest.ErrInjected) || last.Counts.Calls != 1 {
		t.Fatalf("re-opened by %v with %v on %+v, want one failed probe with ErrInjected", last.Trigger, last.Err, last.Counts)
	}
}

func TestHalfOpenAdvancesWhatIsLeftOfTheOpenPeriod(t *testing.T) {
	b, clock, rec := newBreaker(t, nil)
	if err := breakertest.Open(b); err != nil {
		t.Fatal(err)
	}
	clock.Advance(10 * time.Second)
	before := clock.Monotonic()
	if err := breakertest.HalfOpen(b, clock); err != nil {
		t.Fatal(err)
	}
	if got, want := clock.Monotonic()-before, b.Policy().OpenTimeout-10*time.Second; got != want {
		t.Fatalf("advanced the clock %v, want %v", got, want)
	}
	if err := breakertest.HalfOpen(b, clock); err != nil {
		t.Fatal(err)
	}
	rec.AssertStates(t, "closed→open", "open→half_open")
	if last, _ := rec.Last(); last.Reason != breakerconfig.ReasonTimedOut {
		t.Fatalf("reason %v, want TimedOut", last.Reason)
	}
}

func TestHalfOpenOnAnotherClock(t *testing.T) {
	b, _, _ := newBreaker(t, nil)
	wantUnreachable(t, breakertest.HalfOpen(b, breakertest.NewClock(start)), "on this Clock")
}

func TestHalfOpenForcedOpen(t *testing.T) {
	b, clock, _ := newBreaker(t, func(p *breaker.Policy) { p.Mode = breaker.ModeForcedOpen })
	if err := breakertest.Open(b); err != nil {
		t.Fatalf("a forced-open circuit is open: %v", err)
	}
	wantUnreachable(t, breakertest.HalfOpen(b, clock), "ModeForcedOpen")
	wantUnreachable(t, breakertest.Closed(b, clock), "ModeForcedOpen")
}

// Without a Clock, HalfOpen waits for real time to pass.
func TestHalfOpenInRealTime(t *testing.T) {
	p := breaker.DefaultPolicy()
	p.OpenTimeout = 20 * time.Millisecond
	b, err := breaker.New("dep", p)
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if err := breakertest.HalfOpen(b, nil); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(began); waited < p.OpenTimeout {
		t.Fatalf("half-open after %v, before the open period of %v ended", waited, p.OpenTimeout)
	}
}

func TestClosedFromEveryState(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(*breaker.Breaker, *breakertest.Clock) error
		want  []string
	}{
		{"closed", func(*breaker.Breaker, *breakertest.Clock) error { return nil }, nil},
		{"open", func(b *breaker.Breaker, _ *breakertest.Clock) error { return breakertest.Open(b) },
			[]string{"closed→open", "open→half_open", "half_open→closed"}},
		{"half-open", breakertest.HalfOpen,
			[]string{"closed→open", "open→half_open", "half_open→closed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, clock, rec := newBreaker(t, func(p *breaker.Policy) { p.SuccessThreshold = 3 })
			if err := tc.setup(b, clock); err != nil {
				t.Fatal(err)
			}
			if err := breakertest.Closed(b, clock); err != nil {
				t.Fatal(err)
			}
			wantState(t, b, breaker.Closed)
			rec.AssertStates(t, tc.want...)
			if last, ok := rec.Last(); ok && (last.Reason != breakerconfig.ReasonProbesSucceeded || last.Counts.Successes != 3) {
				t.Fatalf("closed by %v on %+v, want 3 probe successes", last.Reason, last.Counts)
			}
		})
	}
}

func TestClosedWithProbesHeld(t *testing.T) {
	b, clock, _ := newBreaker(t, func(p *breaker.Policy) { p.HalfOpenPermittedCalls = 2 })
	if err := breakertest.HalfOpen(b, clock); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		done, err := b.Allow()
		if err != nil {
			t.Fatal(err)
		}
		defer done(nil)
	}
	wantUnreachable(t, breakertest.Closed(b, clock), "refused")
}

// MetricsOnly breakers reach every state as Enforce ones do.
func TestDriversUnderMetricsOnly(t *testing.T) {
	b, clock, rec := newBreaker(t, func(p *breaker.Policy) { p.Mode = breaker.ModeMetricsOnly })
	for _, step := range []func() error{
		func() error { return breakertest.OpenByFailures(b, nil) },
		func() error { return breakertest.Closed(b, clock) },
		func() error { return breakertest.HalfOpen(b, clock) },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	rec.AssertStates(t, "closed→open", "open→half_open", "half_open→closed", "closed→open", "open→half_open")
}

var (
	errBoom   = errors.New("boom")
	errBenign = errors.New("not found: the dependency answered")
)

// A test puts the breaker in front of a dependency in the state it needs in one call, and
// the breaker's log reads as it would in production.
func ExampleOpen() {
	rec := &breakertest.Recorder{}
	b, _ := breaker.New("payments", breaker.DefaultPolicy(), breaker.WithObserver(rec))
	if err := breakertest.Open(b); err != nil {
		panic(err)
	}
	err := b.Execute(context.Background(), func(context.Context) error { return nil })
	fmt.Println(errors.Is(err, breaker.ErrOpen))
	last, _ := rec.Last()
	fmt.Println(breakertest.Arrow(last), last.Reason)
	// Output:
	// true
	// closed→open Manual
}

func ExampleOpenByFailures() {
	rec := &breakertest.Recorder{}
	b, _ := breaker.New("payments", breaker.DefaultPolicy(), breaker.WithObserver(rec))
	if err := breakertest.OpenByFailures(b, errors.New("connection refused")); err != nil {
		panic(err)
	}
	last, _ := rec.Last()
	fmt.Println(breakertest.Arrow(last), last.Reason, last.Err)
	fmt.Printf("%d calls, %d failures\n", last.Counts.Calls, last.Counts.Failures)
	// Output:
	// closed→open Tripped connection refused
	// 20 calls, 20 failures
}

// On a fake Clock the open period passes at once.
func ExampleHalfOpen() {
	clock := breakertest.NewClock(time.Now())
	rec := &breakertest.Recorder{}
	b, _ := breaker.New("payments", breaker.DefaultPolicy(), breaker.WithClock(clock), breaker.WithObserver(rec))
	if err := breakertest.HalfOpen(b, clock); err != nil {
		panic(err)
	}
	fmt.Println(b.State(), clock.Monotonic())
	fmt.Println(rec.States())
	// Output:
	// half_open 30s
	// [closed→open open→half_open]
}

// Closed brings a breaker back from any state through the probes recovery takes.
func ExampleClosed() {
	clock := breakertest.NewClock(time.Now())
	rec := &breakertest.Recorder{}
	b, _ := breaker.New("payments", breaker.DefaultPolicy(), breaker.WithClock(clock), breaker.WithObserver(rec))
	_ = breakertest.Open(b)
	if err := breakertest.Closed(b, clock); err != nil {
		panic(err)
	}
	fmt.Println(rec.States())

	forced := breaker.DefaultPolicy()
	forced.Mode = breaker.ModeForcedOpen
	_ = b.Update(forced)
	err := breakertest.Closed(b, clock)
	fmt.Println(errors.Is(err, breakertest.ErrUnreachable))
	// Output:
	// [closed→open open→half_open half_open→closed]
	// true
}
