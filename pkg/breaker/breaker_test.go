package breaker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/internal/fakeclock"
	"github.com/fusebox-dev/fusebox/pkg/breaker/observe"
)

// testPolicy is small enough to reach every threshold in a few calls.
func testPolicy() Policy {
	return Policy{
		OpenTimeout:            30 * time.Second,
		Window:                 10 * time.Second,
		FailureRatio:           0.5,
		MinimumThroughput:      20,
		SuccessThreshold:       2,
		HalfOpenPermittedCalls: 1,
	}
}

func newTestBreaker(t *testing.T, p Policy, opts ...Option) (*Breaker, *fakeclock.Clock, *recorder) {
	t.Helper()
	clock := newFakeClock()
	rec := &recorder{}
	b, err := New("test", p, append([]Option{WithClock(clock), WithObserver(rec)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return b, clock, rec
}

// do runs one call that returns err, through the two-step form.
func do(t *testing.T, b *Breaker, err error) error {
	t.Helper()
	done, aerr := b.Allow()
	if aerr != nil {
		return aerr
	}
	done(err)
	return nil
}

func doN(t *testing.T, b *Breaker, n int, err error) {
	t.Helper()
	for range n {
		if aerr := do(t, b, err); aerr != nil {
			t.Fatalf("call refused: %v", aerr)
		}
	}
}

func wantState(t *testing.T, b *Breaker, want State) {
	t.Helper()
	if got := b.State(); got != want {
		t.Fatalf("State() = %v, want %v", got, want)
	}
}

func wantCounts(t *testing.T, b *Breaker, want Counts) {
	t.Helper()
	if got := b.Counts(); got != want {
		t.Fatalf("Counts() = %+v, want %+v", got, want)
	}
}

// openIt opens b by failures and returns the time it opened.
func openIt(t *testing.T, b *Breaker, clock *fakeclock.Clock) time.Time {
	t.Helper()
	doN(t, b, b.Policy().MinimumThroughput, errBoom)
	wantState(t, b, Open)
	return clock.Now()
}

func TestClosedWindow(t *testing.T) {
	t.Run("a burst of 5 failures among 1000 successes stays closed", func(t *testing.T) {
		b, _, _ := newTestBreaker(t, testPolicy())
		doN(t, b, 500, nil)
		doN(t, b, 5, errBoom)
		doN(t, b, 500, nil)
		wantState(t, b, Closed)
		wantCounts(t, b, Counts{Calls: 1005, Failures: 5})
	})
	t.Run("19 failures under a minimum of 20 stay closed and the 20th opens", func(t *testing.T) {
		b, _, rec := newTestBreaker(t, testPolicy())
		doN(t, b, 19, errBoom)
		wantState(t, b, Closed)
		doN(t, b, 1, errBoom)
		wantState(t, b, Open)
		tr := rec.takeTransitions()
		if len(tr) != 1 || tr[0].Counts != (Counts{Calls: 20, Failures: 20}) || tr[0].Reason != breakerconfig.ReasonTripped || tr[0].Trigger != breakerconfig.TriggerFailureRate || !errors.Is(tr[0].Err, errBoom) {
			t.Fatalf("transitions = %+v", tr)
		}
	})
	t.Run("alternating failures and successes open at exactly a 50% ratio", func(t *testing.T) {
		b, _, _ := newTestBreaker(t, testPolicy())
		for i := range 19 {
			err := error(nil)
			if i%2 == 1 {
				err = errBoom
			}
			doN(t, b, 1, err)
		}
		wantState(t, b, Closed) // 19 calls, 9 failures: under the minimum
		doN(t, b, 1, errBoom)   // 20 calls, 10 failures: exactly the ratio
		wantState(t, b, Open)
		wantCounts(t, b, Counts{Calls: 20, Failures: 10})
	})
	t.Run("the ratio is judged only after a failure", func(t *testing.T) {
		p := testPolicy()
		p.MinimumThroughput = 4
		b, _, _ := newTestBreaker(t, p)
		doN(t, b, 3, errBoom)
		wantState(t, b, Closed)
		doN(t, b, 1, nil) // 4 calls, 3 failures, but a success does not judge
		wantState(t, b, Closed)
		doN(t, b, 1, errBoom)
		wantState(t, b, Open)
	})
	t.Run("successes never wipe the window", func(t *testing.T) {
		p := testPolicy()
		p.FailureRatio = 0.1
		b, _, _ := newTestBreaker(t, p)
		doN(t, b, 2, errBoom)
		doN(t, b, 17, nil)
		doN(t, b, 1, nil)
		wantState(t, b, Closed)
		doN(t, b, 1, errBoom) // 3 failures of 21 ≥ 10%
		wantState(t, b, Open)
	})
	t.Run("failures two windows old are forgotten, one window old are not", func(t *testing.T) {
		b, clock, _ := newTestBreaker(t, testPolicy())
		// Align to the start of a bucket so that the arithmetic below is exact.
		now := clock.Now().UnixNano()
		w := int64(10 * time.Second)
		clock.Advance(time.Duration(w - now%w))
		doN(t, b, 19, errBoom)
		clock.Advance(10 * time.Second) // the previous bucket: still counted
		wantCounts(t, b, Counts{Calls: 19, Failures: 19})
		clock.Advance(9*time.Second + 999*time.Millisecond)
		wantCounts(t, b, Counts{Calls: 19, Failures: 19})
		clock.Advance(time.Millisecond) // two buckets later: forgotten
		wantCounts(t, b, Counts{})
		doN(t, b, 1, errBoom)
		wantState(t, b, Closed)
		wantCounts(t, b, Counts{Calls: 1, Failures: 1})
	})
	t.Run("buckets are aligned to the epoch, not to the first call", func(t *testing.T) {
		b, clock, _ := newTestBreaker(t, testPolicy())
		now := clock.Now().UnixNano()
		w := int64(10 * time.Second)
		clock.Advance(time.Duration(w - now%w - 1)) // 1ns before a boundary
		doN(t, b, 5, errBoom)
		clock.Advance(10*time.Second + 1) // two boundaries crossed in 10s+1ns
		wantCounts(t, b, Counts{})
	})
	t.Run("context.Canceled is neither success nor failure", func(t *testing.T) {
		b, _, _ := newTestBreaker(t, testPolicy())
		doN(t, b, 5, context.Canceled)
		doN(t, b, 5, fmt.Errorf("wrapped: %w", context.Canceled))
		wantCounts(t, b, Counts{})
	})
	t.Run("deadline exceeded is a failure", func(t *testing.T) {
		b, _, _ := newTestBreaker(t, testPolicy())
		doN(t, b, 1, context.DeadlineExceeded)
		wantCounts(t, b, Counts{Calls: 1, Failures: 1})
	})
	t.Run("an error the classifier does not count is a success", func(t *testing.T) {
		b, _, _ := newTestBreaker(t, testPolicy(), WithClassifier(func(err error) bool { return !errors.Is(err, errBenign) }))
		doN(t, b, 20, errBenign)
		wantState(t, b, Closed)
		wantCounts(t, b, Counts{Calls: 20})
	})
	t.Run("a closed circuit is never capped", func(t *testing.T) {
		b, _, _ := newTestBreaker(t, testPolicy())
		var dones []func(error)
		for range 1000 {
			done, err := b.Allow()
			if err != nil {
				t.Fatalf("closed circuit refused a call: %v", err)
			}
			dones = append(dones, done)
		}
		for _, d := range dones {
			d(nil)
		}
		wantCounts(t, b, Counts{Calls: 1000})
	})
}

func TestOpenAndHalfOpen(t *testing.T) {
	t.Run("open short-circuits until the timeout, then the next call probes", func(t *testing.T) {
		b, clock, rec := newTestBreaker(t, testPolicy())
		openIt(t, b, clock)
		ran := false
		err := b.Execute(context.Background(), func(context.Context) error { ran = true; return nil })
		if !errors.Is(err, ErrOpen) || ran {
			t.Fatalf("Execute on an open circuit: err %v, ran %v", err, ran)
		}
		if d, ok := b.RetryAfter(); !ok || d != 30*time.Second {
			t.Fatalf("RetryAfter = %v, %v", d, ok)
		}
		clock.Advance(30*time.Second - 1)
		if err := do(t, b, nil); !errors.Is(err, ErrOpen) {
			t.Fatalf("1ns before the timeout: %v", err)
		}
		clock.Advance(1)
		rec.takeTransitions()
		done, err := b.Allow()
		if err != nil {
			t.Fatalf("at the timeout: %v", err)
		}
		tr := rec.takeTransitions()
		if len(tr) != 1 || tr[0].From != Open || tr[0].To != HalfOpen || tr[0].Reason != breakerconfig.ReasonTimedOut || tr[0].Counts != (Counts{Calls: 20, Failures: 20}) {
			t.Fatalf("transitions = %+v", tr)
		}
		wantCounts(t, b, Counts{}) // the window was cleared
		done(nil)
		wantCounts(t, b, Counts{Calls: 1, Successes: 1})
	})
	t.Run("State moves an expired open circuit to half-open", func(t *testing.T) {
		b, clock, _ := newTestBreaker(t, testPolicy())
		openIt(t, b, clock)
		clock.Advance(31 * time.Second)
		wantState(t, b, HalfOpen)
	})
	t.Run("successThreshold consecutive probe successes close it, clearing the window", func(t *testing.T) {
		b, clock, rec := newTestBreaker(t, testPolicy())
		openIt(t, b, clock)
		clock.Advance(30 * time.Second)
		doN(t, b, 1, nil)
		wantState(t, b, HalfOpen)
		rec.takeTransitions()
		doN(t, b, 1, errBenign) // classifier says failure by default: use a success
		wantState(t, b, Open)
		clock.Advance(30 * time.Second)
		doN(t, b, 2, nil)
		wantState(t, b, Closed)
		wantCounts(t, b, Counts{})
	})
	t.Run("any probe failure re-opens with a new open period", func(t *testing.T) {
		b, clock, rec := newTestBreaker(t, testPolicy())
		openIt(t, b, clock)
		clock.Advance(30 * time.Second)
		doN(t, b, 1, nil)
		rec.takeTransitions()
		doN(t, b, 1, errBoom)
		wantState(t, b, Open)
		tr := rec.takeTransitions()
		if len(tr) != 1 || tr[0].Counts != (Counts{Calls: 2, Failures: 1, Successes: 1}) || !errors.Is(tr[0].Err, errBoom) {
			t.Fatalf("transitions = %+v", tr)
		}
		wantCounts(t, b, Counts{Calls: 2, Failures: 1})
		if v := b.Verdict(); !v.Since.Equal(clock.Now()) {
			t.Fatalf("new open period since %v, want %v", v.Since, clock.Now())
		}
		clock.Advance(30*time.Second - 1)
		wantState(t, b, Open)
	})
	t.Run("re-opening never reuses the tally that opened it", func(t *testing.T) {
		b, clock, _ := newTestBreaker(t, testPolicy())
		openIt(t, b, clock)
		wantCounts(t, b, Counts{Calls: 20, Failures: 20}) // readable while open
		clock.Advance(30 * time.Second)
		doN(t, b, 2, nil)
		wantState(t, b, Closed)
		doN(t, b, 1, errBoom) // would open at once if the old 20 failures were still there
		wantState(t, b, Closed)
		wantCounts(t, b, Counts{Calls: 1, Failures: 1})
	})
	t.Run("a second concurrent probe is refused while the cap is 1, and counts as neither", func(t *testing.T) {
		b, clock, rec := newTestBreaker(t, testPolicy())
		openIt(t, b, clock)
		clock.Advance(30 * time.Second)
		done, err := b.Allow()
		if err != nil {
			t.Fatal(err)
		}
		_, err = b.Allow()
		oe, ok := errors.AsType[*openError](err)
		if !ok || !errors.Is(err, ErrOpen) || oe.reason != rejectHalfOpenSaturated {
			t.Fatalf("second probe: %v", err)
		}
		wantCounts(t, b, Counts{})
		wantState(t, b, HalfOpen)
		done(nil)
		wantCounts(t, b, Counts{Calls: 1, Successes: 1})
		if e := rec.ends[20]; e.Outcome != observe.OutcomeRejected || refusedIn(e.Err) != HalfOpen || e.Initial != HalfOpen {
			t.Fatalf("call events = %+v", rec.ends)
		}
		// The slot is free again.
		if err := do(t, b, nil); err != nil {
			t.Fatal(err)
		}
		wantState(t, b, Closed)
	})
	t.Run("a cancelled probe frees its slot and changes nothing", func(t *testing.T) {
		b, clock, _ := newTestBreaker(t, testPolicy())
		openIt(t, b, clock)
		clock.Advance(30 * time.Second)
		doN(t, b, 1, nil)
		doN(t, b, 1, context.Canceled)
		wantState(t, b, HalfOpen)
		wantCounts(t, b, Counts{Calls: 1, Successes: 1})
		doN(t, b, 1, nil)
		wantState(t, b, Closed)
	})
	t.Run("a late failure from a call admitted while closed does not re-open a half-open circuit", func(t *testing.T) {
		b, clock, _ := newTestBreaker(t, testPolicy())
		late, err := b.Allow()
		if err != nil {
			t.Fatal(err)
		}
		openIt(t, b, clock)
		clock.Advance(30 * time.Second)
		wantState(t, b, HalfOpen)
		late(errBoom)
		wantState(t, b, HalfOpen)
		wantCounts(t, b, Counts{})
	})
	t.Run("a late success from before a transition is not counted", func(t *testing.T) {
		b, clock, _ := newTestBreaker(t, testPolicy())
		late, _ := b.Allow()
		b.Trip()
		b.Adopt(Verdict{State: Closed, Since: clock.Now()})
		late(nil)
		wantCounts(t, b, Counts{})
	})
	t.Run("a late probe result does not count in the next half-open period", func(t *testing.T) {
		p := testPolicy()
		p.HalfOpenPermittedCalls = 2
		b, clock, _ := newTestBreaker(t, p)
		openIt(t, b, clock)
		clock.Advance(30 * time.Second)
		slow, _ := b.Allow()
		doN(t, b, 1, errBoom) // re-opens
		clock.Advance(30 * time.Second)
		wantState(t, b, HalfOpen)
		slow(nil)
		wantCounts(t, b, Counts{})
		// both slots are free in the new period
		d1, e1 := b.Allow()
		d2, e2 := b.Allow()
		if e1 != nil || e2 != nil {
			t.Fatalf("probe slots leaked: %v, %v", e1, e2)
		}
		d1(nil)
		d2(nil)
		wantState(t, b, Closed)
	})
}

func TestPanics(t *testing.T) {
	b, _, rec := newTestBreaker(t, testPolicy())
	func() {
		defer func() {
			if r := recover(); r != "kaboom" {
				t.Fatalf("recovered %v, want the original panic value", r)
			}
		}()
		_ = b.Execute(context.Background(), func(context.Context) error { panic("kaboom") })
		t.Fatal("Execute swallowed the panic")
	}()
	wantCounts(t, b, Counts{Calls: 1, Failures: 1})
	e := rec.ends[len(rec.ends)-1]
	if e.Panic != "kaboom" || e.Outcome != observe.OutcomeFailure {
		t.Fatalf("call event = %+v", e)
	}
	if _, ok := errors.AsType[*panicError](e.Err); !ok {
		t.Fatalf("call event error = %v", e.Err)
	}
	func() {
		defer func() { _ = recover() }()
		_, _ = Call(context.Background(), b, Callbacks[int]{
			Closed: func(context.Context) (int, error) { panic("again") },
			Open:   func(context.Context, error) (int, error) { t.Fatal("fallback ran for a panic"); return 0, nil },
		})
	}()
	wantCounts(t, b, Counts{Calls: 2, Failures: 2})
}

func TestCall(t *testing.T) {
	fallback := func(ctx context.Context, cause error) (string, error) { return "fallback: " + cause.Error(), nil }
	t.Run("closed runs Closed; failures run the fallback with the failure", func(t *testing.T) {
		b, _, rec := newTestBreaker(t, testPolicy())
		got, err := Call(context.Background(), b, Callbacks[string]{
			Closed: func(context.Context) (string, error) { return "ok", nil },
			Open:   fallback,
		})
		if got != "ok" || err != nil {
			t.Fatalf("got %q, %v", got, err)
		}
		got, err = Call(context.Background(), b, Callbacks[string]{
			Closed: func(context.Context) (string, error) { return "", errBoom },
			Open:   fallback,
		})
		if got != "fallback: boom" || err != nil {
			t.Fatalf("got %q, %v", got, err)
		}
		if len(rec.fallbacks) != 1 || rec.fallbacks[0] != "failure" {
			t.Fatalf("fallbacks = %v", rec.fallbacks)
		}
	})
	t.Run("errors that are not failures are returned as they are", func(t *testing.T) {
		b, _, _ := newTestBreaker(t, testPolicy(), WithClassifier(func(err error) bool {
			return !errors.Is(err, errBenign) && !errors.Is(err, context.Canceled)
		}))
		for _, want := range []error{errBenign, context.Canceled} {
			_, err := Call(context.Background(), b, Callbacks[string]{
				Closed: func(context.Context) (string, error) { return "", want },
				Open:   fallback,
			})
			if err != want {
				t.Fatalf("got %v, want %v", err, want)
			}
		}
	})
	t.Run("short-circuits run the fallback with an ErrOpen cause", func(t *testing.T) {
		b, clock, rec := newTestBreaker(t, testPolicy())
		openIt(t, b, clock)
		var cause error
		got, err := Call(context.Background(), b, Callbacks[string]{
			Closed: func(context.Context) (string, error) { t.Fatal("ran while open"); return "", nil },
			Open:   func(_ context.Context, c error) (string, error) { cause = c; return "cached", nil },
		})
		if got != "cached" || err != nil || !errors.Is(cause, ErrOpen) {
			t.Fatalf("got %q, %v, cause %v", got, err, cause)
		}
		if rec.fallbacks[len(rec.fallbacks)-1] != "open" {
			t.Fatalf("fallbacks = %v", rec.fallbacks)
		}
		// Without a fallback the error is returned.
		if _, err := Call(context.Background(), b, Callbacks[string]{Closed: func(context.Context) (string, error) { return "", nil }}); !errors.Is(err, ErrOpen) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("probes run HalfOpen when given", func(t *testing.T) {
		b, clock, rec := newTestBreaker(t, testPolicy())
		openIt(t, b, clock)
		clock.Advance(30 * time.Second)
		var which []string
		cb := Callbacks[string]{
			Closed:   func(context.Context) (string, error) { which = append(which, "closed"); return "", nil },
			HalfOpen: func(context.Context) (string, error) { which = append(which, "half-open"); return "", nil },
			Open:     fallback,
		}
		var inner string
		cb2 := cb
		cb2.HalfOpen = func(ctx context.Context) (string, error) {
			// While this probe runs the cap is reached: a nested call is refused.
			_, err := Call(ctx, b, Callbacks[string]{Closed: cb.Closed, Open: func(_ context.Context, c error) (string, error) {
				inner = c.Error()
				return "", nil
			}})
			which = append(which, "half-open")
			return "", err
		}
		_, _ = Call(context.Background(), b, cb2)
		_, _ = Call(context.Background(), b, cb)
		_, _ = Call(context.Background(), b, cb)
		if got := strings.Join(which, ","); got != "half-open,half-open,closed" {
			t.Fatalf("callbacks ran: %s", got)
		}
		if !strings.Contains(inner, "probe limit") {
			t.Fatalf("nested call cause %q", inner)
		}
		if rec.fallbacks[len(rec.fallbacks)-1] != "half_open_saturated" {
			t.Fatalf("fallbacks = %v", rec.fallbacks)
		}
	})
	t.Run("a nil Closed callback is an error", func(t *testing.T) {
		b, _, _ := newTestBreaker(t, testPolicy())
		if _, err := Call(context.Background(), b, Callbacks[int]{}); !errors.Is(err, errNoClosedCallback) {
			t.Fatalf("got %v", err)
		}
	})
}
