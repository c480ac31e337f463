package breaker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker/internal/fakeclock"
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
		if len(tr) != 1 || tr[0].Counts != (Counts{Calls: 20, Failures: 20}) || tr[0].Cause != CauseCalls || !errors.Is(tr[0].Err, errBoom) {
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
		if len(tr) != 1 || tr[0].From != Open || tr[0].To != HalfOpen || tr[0].Cause != CauseTimeout || tr[0].Counts != (Counts{Calls: 20, Failures: 20}) {
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
		oe, ok := errors.AsType[*OpenError](err)
		if !ok || !errors.Is(err, ErrOpen) || oe.Reason != RejectHalfOpenSaturated {
			t.Fatalf("second probe: %v", err)
		}
		wantCounts(t, b, Counts{})
		wantState(t, b, HalfOpen)
		done(nil)
		wantCounts(t, b, Counts{Calls: 1, Successes: 1})
		if e := rec.ends[20]; e.Outcome != OutcomeRejected || e.Reason != RejectHalfOpenSaturated || e.Initial != HalfOpen {
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
	if !e.Panicked || e.Outcome != OutcomeFailure {
		t.Fatalf("call event = %+v", e)
	}
	if pe, ok := errors.AsType[*PanicError](e.Err); !ok || pe.Value != "kaboom" {
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
		if len(rec.fallbacks) != 1 || rec.fallbacks[0] != FallbackFailure {
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
		if rec.fallbacks[len(rec.fallbacks)-1] != FallbackOpen {
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
		if rec.fallbacks[len(rec.fallbacks)-1] != FallbackHalfOpenSaturated {
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

func TestModes(t *testing.T) {
	withMode := func(m Mode) Policy { p := testPolicy(); p.Mode = m; return p }
	t.Run("MetricsOnly computes the verdict but never short-circuits", func(t *testing.T) {
		b, clock, rec := newTestBreaker(t, withMode(ModeMetricsOnly))
		doN(t, b, 20, errBoom)
		wantState(t, b, Open)
		if tr := rec.takeTransitions(); len(tr) != 1 || tr[0].To != Open {
			t.Fatalf("transitions = %+v", tr)
		}
		// Calls Enforce would refuse run, and are not recorded.
		doN(t, b, 5, errBoom)
		doN(t, b, 5, nil)
		wantCounts(t, b, Counts{Calls: 20, Failures: 20})
		for _, e := range rec.ends[len(rec.ends)-10:] {
			if e.Outcome != OutcomeIgnored || e.Initial != Open {
				t.Fatalf("call event %+v", e)
			}
		}
		clock.Advance(30 * time.Second)
		probe, err := b.Allow()
		if err != nil {
			t.Fatal(err)
		}
		doN(t, b, 3, errBoom) // over the cap: runs, not recorded
		wantState(t, b, HalfOpen)
		probe(nil)
		doN(t, b, 1, nil)
		wantState(t, b, Closed)
	})
	t.Run("ForcedOpen refuses everything and holds past the timeout", func(t *testing.T) {
		b, clock, rec := newTestBreaker(t, testPolicy())
		if err := b.Update(withMode(ModeForcedOpen)); err != nil {
			t.Fatal(err)
		}
		forcedAt := clock.Now()
		tr := rec.takeTransitions()
		if len(tr) != 1 || tr[0].To != Open || tr[0].Cause != CauseMode {
			t.Fatalf("transitions = %+v", tr)
		}
		clock.Advance(time.Hour)
		err := do(t, b, nil)
		if oe, ok := errors.AsType[*OpenError](err); !ok || oe.Reason != RejectForcedOpen {
			t.Fatalf("got %v", err)
		}
		wantState(t, b, Open)
		b.Trip() // the mode wins
		if b.Adopt(Verdict{State: Closed, Since: clock.Now()}) {
			t.Fatal("Adopt changed a forced state")
		}
		if v := b.Verdict(); !v.Since.Equal(forcedAt) {
			t.Fatalf("open since %v, want %v", v.Since, forcedAt)
		}
		// Back in Enforce it is an ordinary open circuit that opened when it was forced.
		if err := b.Update(testPolicy()); err != nil {
			t.Fatal(err)
		}
		if len(rec.takeTransitions()) != 0 {
			t.Fatal("leaving ForcedOpen made a transition")
		}
		wantState(t, b, HalfOpen)
	})
	t.Run("ForcedOpen keeps an open period already running", func(t *testing.T) {
		b, clock, _ := newTestBreaker(t, testPolicy())
		opened := openIt(t, b, clock)
		clock.Advance(10 * time.Second)
		_ = b.Update(withMode(ModeForcedOpen))
		_ = b.Update(testPolicy())
		clock.Advance(20*time.Second - 1)
		wantState(t, b, Open)
		if v := b.Verdict(); !v.Since.Equal(opened) {
			t.Fatalf("since %v, want %v", v.Since, opened)
		}
		clock.Advance(1)
		wantState(t, b, HalfOpen)
	})
	t.Run("ForcedClosed never opens; back in Enforce the window stands", func(t *testing.T) {
		b, clock, _ := newTestBreaker(t, testPolicy())
		openIt(t, b, clock)
		_ = b.Update(withMode(ModeForcedClosed))
		wantState(t, b, Closed)
		wantCounts(t, b, Counts{}) // closing clears the window
		doN(t, b, 30, errBoom)
		wantState(t, b, Closed)
		wantCounts(t, b, Counts{Calls: 30, Failures: 30})
		b.Trip()
		wantState(t, b, Closed)
		_ = b.Update(testPolicy())
		wantState(t, b, Closed) // judged after the next failure
		doN(t, b, 1, errBoom)
		wantState(t, b, Open)
		wantCounts(t, b, Counts{Calls: 31, Failures: 31})
	})
	t.Run("Trip opens now and restarts an open period", func(t *testing.T) {
		b, clock, rec := newTestBreaker(t, testPolicy())
		doN(t, b, 3, errBoom)
		b.Trip()
		wantState(t, b, Open)
		wantCounts(t, b, Counts{Calls: 3, Failures: 3})
		clock.Advance(20 * time.Second)
		b.Trip() // restarts the open period, and is no transition
		tr := rec.takeTransitions()
		if len(tr) != 1 || tr[0].From != Closed || tr[0].To != Open || tr[0].Cause != CauseTrip || tr[0].Period != 1 {
			t.Fatalf("transitions = %+v", tr)
		}
		if v := b.Verdict(); !v.Since.Equal(clock.Now()) || v.ConsecutiveOpens != 1 || v.OpenTimeout != 30*time.Second {
			t.Fatalf("verdict after a restart %+v, want open since now for 30s", v)
		}
		clock.Advance(20 * time.Second)
		wantState(t, b, Open)
		clock.Advance(10 * time.Second)
		wantState(t, b, HalfOpen)
	})
	t.Run("a forced mode at creation", func(t *testing.T) {
		b, _, _ := newTestBreaker(t, withMode(ModeForcedOpen))
		wantState(t, b, Open)
		if err := do(t, b, nil); !errors.Is(err, ErrOpen) {
			t.Fatalf("got %v", err)
		}
	})
}

func TestUpdate(t *testing.T) {
	t.Run("an open circuit stays open, timed from when it opened", func(t *testing.T) {
		b, clock, _ := newTestBreaker(t, testPolicy())
		openIt(t, b, clock)
		clock.Advance(10 * time.Second)
		p := testPolicy()
		p.OpenTimeout = 15 * time.Second
		if err := b.Update(p); err != nil {
			t.Fatal(err)
		}
		wantState(t, b, Open)
		wantCounts(t, b, Counts{Calls: 20, Failures: 20})
		clock.Advance(5 * time.Second)
		wantState(t, b, HalfOpen)
	})
	t.Run("the window keeps its tallies, which age out under the new width", func(t *testing.T) {
		b, clock, _ := newTestBreaker(t, testPolicy())
		doN(t, b, 7, errBoom)
		p := testPolicy()
		p.Window = time.Second
		_ = b.Update(p)
		wantCounts(t, b, Counts{Calls: 7, Failures: 7})
		clock.Advance(2 * time.Second)
		wantCounts(t, b, Counts{})
	})
	t.Run("an invalid policy is refused naming the field, and the old one stays", func(t *testing.T) {
		b, clock, _ := newTestBreaker(t, testPolicy())
		openIt(t, b, clock)
		p := testPolicy()
		p.Window = -time.Second
		err := b.Update(p)
		if fe, ok := errors.AsType[*FieldError](err); !ok || fe.Field != "window" {
			t.Fatalf("got %v", err)
		}
		if b.Policy() != testPolicy().withDefaults() {
			t.Fatalf("policy changed to %+v", b.Policy())
		}
		wantState(t, b, Open)
	})
	t.Run("probes in flight stay in flight when the cap shrinks", func(t *testing.T) {
		p := testPolicy()
		p.HalfOpenPermittedCalls = 3
		b, clock, _ := newTestBreaker(t, p)
		openIt(t, b, clock)
		clock.Advance(30 * time.Second)
		d1, _ := b.Allow()
		d2, _ := b.Allow()
		p.HalfOpenPermittedCalls = 1
		_ = b.Update(p)
		if err := do(t, b, nil); !errors.Is(err, ErrOpen) {
			t.Fatalf("third probe admitted over the new cap: %v", err)
		}
		d1(nil)
		d2(nil)
		wantState(t, b, Closed)
	})
}

func TestValidate(t *testing.T) {
	mod := func(f func(*Policy)) Policy { p := DefaultPolicy(); f(&p); return p }
	nan := 0.0
	nan /= nan
	tests := []struct {
		name  string
		p     Policy
		field string
	}{
		{"negative timeout", mod(func(p *Policy) { p.OpenTimeout = -1 }), "openTimeout"},
		{"negative window", mod(func(p *Policy) { p.Window = -time.Second }), "window"},
		{"negative ratio", mod(func(p *Policy) { p.FailureRatio = -0.5 }), "failureRatio"},
		{"ratio above 1", mod(func(p *Policy) { p.FailureRatio = 1.01 }), "failureRatio"},
		{"NaN ratio", mod(func(p *Policy) { p.FailureRatio = nan }), "failureRatio"},
		{"negative minimum", mod(func(p *Policy) { p.MinimumThroughput = -1 }), "minimumThroughput"},
		{"negative threshold", mod(func(p *Policy) { p.SuccessThreshold = -2 }), "successThreshold"},
		{"negative probes", mod(func(p *Policy) { p.HalfOpenPermittedCalls = -1 }), "halfOpenPermittedCalls"},
		{"negative slow duration", mod(func(p *Policy) { p.SlowCallDuration = -1 }), "slowCallDuration"},
		{"slow ratio above 1", mod(func(p *Policy) { p.SlowCallRatio = 2 }), "slowCallRatio"},
		{"negative backoff", mod(func(p *Policy) { p.MaxOpenTimeout = -1 }), "maxOpenTimeout"},
		{"backoff below the default open timeout", Policy{MaxOpenTimeout: 10 * time.Second}, "maxOpenTimeout"},
		{"unknown mode", mod(func(p *Policy) { p.Mode = "enforce" }), "mode"},
		{"ratio of exactly 1", mod(func(p *Policy) { p.FailureRatio = 1 }), ""},
		{"empty mode", mod(func(p *Policy) { p.Mode = "" }), ""},
		{"tiny durations", mod(func(p *Policy) { p.Window, p.OpenTimeout = 1, 1 }), ""},
		{"the zero policy", Policy{}, ""},
		{"zero fields", Policy{OpenTimeout: time.Minute, MaxOpenTimeout: 4 * time.Minute}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.p.Validate()
			if tt.field == "" {
				if err != nil {
					t.Fatalf("refused a valid policy: %v", err)
				}
				return
			}
			fe, ok := errors.AsType[*FieldError](err)
			if !ok || fe.Field != tt.field || !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("got %v, want an error naming %s", err, tt.field)
			}
			if _, err := New("x", tt.p); err == nil {
				t.Fatal("New accepted an invalid policy")
			}
		})
	}
	t.Run("every bad field is named", func(t *testing.T) {
		err := Policy{OpenTimeout: -1, Window: -1, FailureRatio: -1, MinimumThroughput: -1, SuccessThreshold: -1, HalfOpenPermittedCalls: -1}.Validate()
		for _, f := range []string{"openTimeout", "window", "failureRatio", "minimumThroughput", "successThreshold", "halfOpenPermittedCalls"} {
			if !strings.Contains(err.Error(), f) {
				t.Errorf("%v does not name %s", err, f)
			}
		}
	})
}

// TestZeroPolicy: a zero Policy, or zero fields, take DefaultPolicy's values, as a zero
// gobreaker.Settings does; Policy reports the values in force.
func TestZeroPolicy(t *testing.T) {
	b, err := New("zero", Policy{})
	if err != nil {
		t.Fatal(err)
	}
	if got := b.Policy(); got != DefaultPolicy() {
		t.Fatalf("Policy() = %+v, want DefaultPolicy %+v", got, DefaultPolicy())
	}
	b, clock, _ := newTestBreaker(t, Policy{OpenTimeout: time.Minute, MinimumThroughput: 4})
	want := DefaultPolicy()
	want.OpenTimeout, want.MinimumThroughput = time.Minute, 4
	if got := b.Policy(); got != want {
		t.Fatalf("Policy() = %+v, want %+v", got, want)
	}
	openIt(t, b, clock)
	clock.Advance(time.Minute - 1)
	wantState(t, b, Open)
	clock.Advance(1)
	wantState(t, b, HalfOpen)
	// Update takes zero fields the same way: back to the default open timeout.
	if err := b.Update(Policy{}); err != nil || b.Policy() != DefaultPolicy() {
		t.Fatalf("Update(Policy{}) = %v, policy %+v", err, b.Policy())
	}
	r, err := NewRegistry(Policy{})
	if err != nil || r.Get("x").Policy() != DefaultPolicy() {
		t.Fatalf("NewRegistry(Policy{}) = %v", err)
	}
}

func TestAdopt(t *testing.T) {
	t.Run("Open from closed keeps the tally and times out from Since", func(t *testing.T) {
		b, clock, rec := newTestBreaker(t, testPolicy())
		doN(t, b, 4, errBoom)
		since := clock.Now().Add(-10 * time.Second)
		if !b.Adopt(Verdict{State: Open, Since: since}) {
			t.Fatal("Adopt(Open) did not change the state")
		}
		tr := rec.takeTransitions()
		if len(tr) != 1 || tr[0].Cause != CauseAdopted || !tr[0].At.Equal(since) || tr[0].Counts != (Counts{Calls: 4, Failures: 4}) {
			t.Fatalf("transitions = %+v", tr)
		}
		wantCounts(t, b, Counts{Calls: 4, Failures: 4})
		if b.Adopt(Verdict{State: Open, Since: since}) {
			t.Fatal("an identical verdict changed something")
		}
		clock.Advance(20*time.Second - 1)
		wantState(t, b, Open)
		clock.Advance(1)
		wantState(t, b, HalfOpen)
	})
	t.Run("Open while open replaces the start of the open period", func(t *testing.T) {
		b, clock, rec := newTestBreaker(t, testPolicy())
		openIt(t, b, clock)
		rec.takeTransitions()
		if b.Adopt(Verdict{State: Open, Since: clock.Now().Add(-25 * time.Second)}) {
			t.Fatal("re-timing an open circuit is not a change of state")
		}
		if len(rec.takeTransitions()) != 0 {
			t.Fatal("re-timing delivered a transition")
		}
		clock.Advance(5 * time.Second)
		wantState(t, b, HalfOpen)
	})
	t.Run("HalfOpen only from open; the probes are its own", func(t *testing.T) {
		p := testPolicy()
		p.SuccessThreshold = 2
		b, clock, _ := newTestBreaker(t, p)
		if b.Adopt(Verdict{State: HalfOpen, Since: clock.Now()}) {
			t.Fatal("HalfOpen adopted from closed")
		}
		openIt(t, b, clock)
		if !b.Adopt(Verdict{State: HalfOpen, Since: clock.Now()}) {
			t.Fatal("HalfOpen not adopted from open")
		}
		wantCounts(t, b, Counts{}) // no successes are carried: counters are never shared
		doN(t, b, 1, nil)
		wantState(t, b, HalfOpen)
		doN(t, b, 1, nil)
		wantState(t, b, Closed)
	})
	t.Run("Closed closes from open or half-open", func(t *testing.T) {
		b, clock, _ := newTestBreaker(t, testPolicy())
		openIt(t, b, clock)
		clock.Advance(time.Second)
		if !b.Adopt(Verdict{State: Closed, Since: clock.Now()}) {
			t.Fatal("Closed not adopted")
		}
		wantCounts(t, b, Counts{})
		if b.Adopt(Verdict{State: Closed, Since: clock.Now()}) {
			t.Fatal("Closed adopted while closed")
		}
	})
	t.Run("Closed ends an open period that went half-open on its own", func(t *testing.T) {
		// The fleet closed after this pod opened; this pod's own timeout then
		// moved it to half-open before the verdict arrived. The verdict is about
		// this open period, so it closes the circuit without a probe.
		b, clock, _ := newTestBreaker(t, testPolicy())
		opened := openIt(t, b, clock)
		clock.Advance(30 * time.Second)
		wantState(t, b, HalfOpen)
		if !b.Adopt(Verdict{State: Closed, Since: opened.Add(29 * time.Second)}) {
			t.Fatal("the fleet's Closed verdict did not close a half-open circuit")
		}
		wantState(t, b, Closed)
	})
	t.Run("Closed from before the open period is ignored", func(t *testing.T) {
		b, clock, _ := newTestBreaker(t, testPolicy())
		opened := openIt(t, b, clock)
		clock.Advance(30 * time.Second)
		wantState(t, b, HalfOpen)
		if b.Adopt(Verdict{State: Closed, Since: opened.Add(-time.Second)}) {
			t.Fatal("a verdict older than the open period closed it")
		}
		wantState(t, b, HalfOpen)
	})
	t.Run("a verdict older than the local state is ignored", func(t *testing.T) {
		b, clock, _ := newTestBreaker(t, testPolicy())
		opened := openIt(t, b, clock)
		clock.Advance(30 * time.Second)
		doN(t, b, 2, nil) // closed by its own probes
		if b.Adopt(Verdict{State: Open, Since: opened}) {
			t.Fatal("a late copy of the old open verdict re-opened the circuit")
		}
		wantState(t, b, Closed)
	})
	t.Run("a verdict from the future counts as reached now", func(t *testing.T) {
		b, clock, rec := newTestBreaker(t, testPolicy())
		now := clock.Now()
		ahead := Verdict{State: Open, Since: now.Add(time.Hour)}
		if !b.Adopt(ahead) {
			t.Fatal("not adopted")
		}
		if v := b.Verdict(); !v.Since.Equal(now) {
			t.Fatalf("open since %v, want clamped to %v", v.Since, now)
		}
		if tr := rec.takeTransitions(); len(tr) != 1 || !tr[0].At.Equal(now) {
			t.Fatalf("transitions = %+v", tr)
		}
		// Delivered again later, it does not restart the open period.
		clock.Advance(20 * time.Second)
		if b.Adopt(ahead) {
			t.Fatal("a repeated verdict changed the state")
		}
		clock.Advance(10*time.Second - 1)
		wantState(t, b, Open)
		clock.Advance(1)
		wantState(t, b, HalfOpen) // OpenTimeout after this pod's now, not after the future
	})
	t.Run("a verdict from the future does not re-time a running open period", func(t *testing.T) {
		b, clock, _ := newTestBreaker(t, testPolicy())
		opened := openIt(t, b, clock)
		clock.Advance(10 * time.Second)
		b.Adopt(Verdict{State: Open, Since: clock.Now().Add(time.Minute)})
		if v := b.Verdict(); !v.Since.Equal(opened) {
			t.Fatalf("open since %v, want %v", v.Since, opened)
		}
		clock.Advance(20 * time.Second)
		wantState(t, b, HalfOpen)
	})
	t.Run("created forced open, then enforcing: a Closed verdict from before is refused", func(t *testing.T) {
		p := testPolicy()
		p.Mode = ModeForcedOpen
		b, clock, _ := newTestBreaker(t, p)
		created := clock.Now()
		clock.Advance(10 * time.Second)
		if err := b.Update(testPolicy()); err != nil {
			t.Fatal(err)
		}
		if b.Adopt(Verdict{State: Closed, Since: created.Add(-time.Second)}) {
			t.Fatal("a Closed verdict older than the forced open period closed it")
		}
		wantState(t, b, Open)
		if v := b.Verdict(); !v.Since.Equal(created) {
			t.Fatalf("open since %v, want %v", v.Since, created)
		}
		// A Closed verdict reached during this open period ends it.
		if !b.Adopt(Verdict{State: Closed, Since: created.Add(time.Second)}) {
			t.Fatal("a Closed verdict about this open period was refused")
		}
		wantState(t, b, Closed)
	})
	t.Run("a fresh breaker adopts an open period that began before it existed", func(t *testing.T) {
		b, clock, _ := newTestBreaker(t, testPolicy())
		if !b.Adopt(Verdict{State: Open, Since: clock.Now().Add(-time.Second)}) {
			t.Fatal("not adopted")
		}
	})
}

// TestObserverMayCallBack checks that observers run without the breaker's lock held.
func TestObserverMayCallBack(t *testing.T) {
	var b *Breaker
	var seen []State
	obs := ObserverFunc(func(tr Transition) {
		seen = append(seen, b.State())
		_ = b.Counts()
		_ = b.Verdict()
	})
	clock := newFakeClock()
	b, _ = New("cb", testPolicy(), WithClock(clock), WithObserver(obs))
	doN(t, b, 20, errBoom)
	if len(seen) != 1 || seen[0] != Open {
		t.Fatalf("observer saw %v", seen)
	}
}

func TestCallEvents(t *testing.T) {
	b, clock, rec := newTestBreaker(t, testPolicy())
	doN(t, b, 1, nil)
	doN(t, b, 1, context.Canceled)
	doN(t, b, 19, errBoom)
	_ = do(t, b, nil)
	clock.Advance(time.Second)
	if rec.starts != 21 || len(rec.ends) != 22 {
		t.Fatalf("starts %d, ends %d", rec.starts, len(rec.ends))
	}
	want := []Outcome{OutcomeSuccess, OutcomeIgnored, OutcomeFailure}
	for i, o := range want {
		if rec.ends[i].Outcome != o {
			t.Errorf("event %d: %v, want %v", i, rec.ends[i].Outcome, o)
		}
	}
	last := rec.ends[20]
	if last.Initial != Closed || last.Final != Open || last.Outcome != OutcomeFailure {
		t.Fatalf("opening call: %+v", last)
	}
	if r := rec.ends[21]; r.Outcome != OutcomeRejected || r.Reason != RejectOpen {
		t.Fatalf("rejected call: %+v", r)
	}
}

func TestStrings(t *testing.T) {
	checks := map[fmt.Stringer]string{
		Closed: "closed", Open: "open", HalfOpen: "half_open",
		OutcomeSuccess: "success", OutcomeFailure: "failure", OutcomeIgnored: "ignored", OutcomeRejected: "rejected",
		RejectNone: "", RejectOpen: "open", RejectHalfOpenSaturated: "half_open_saturated", RejectForcedOpen: "forced_open",
		FallbackOpen: "open", FallbackHalfOpenSaturated: "half_open_saturated", FallbackFailure: "failure",
		CauseCalls: "calls", CauseTimeout: "timeout", CauseTrip: "trip", CauseMode: "mode", CauseAdopted: "adopted",
	}
	for v, want := range checks {
		if got := v.String(); got != want {
			t.Errorf("%#v.String() = %q, want %q", v, got, want)
		}
	}
}

// TestRealClock runs a breaker on the coarse clock, the way production does.
func TestRealClock(t *testing.T) {
	b, err := New("real", testPolicy())
	if err != nil {
		t.Fatal(err)
	}
	for range 100 {
		if err := b.Execute(context.Background(), func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if c := b.Counts(); c.Calls != 100 {
		t.Fatalf("Counts = %+v", c)
	}
	if d := time.Duration(coarseNow() - time.Now().UnixNano()); d > 0 || d < -time.Second {
		t.Fatalf("coarse clock is %v off the wall clock", d)
	}
	b.Trip()
	// The coarse clock may lag the exact opening time by about a tick.
	if d, ok := b.RetryAfter(); !ok || d <= 29*time.Second || d > 30*time.Second+100*time.Millisecond {
		t.Fatalf("RetryAfter = %v, %v", d, ok)
	}
}
