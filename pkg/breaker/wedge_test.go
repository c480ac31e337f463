package breaker

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/observe"
)

// The tests in this file are the guards docs/semantics.md lists under "What cannot wedge a
// breaker".

// TestLeakedProbe: a half-open period in which no probe outcome arrives for OpenTimeout
// after the last admission re-opens the circuit (docs/design.md §5.3).
func TestLeakedProbe(t *testing.T) {
	wantRefused := func(t *testing.T, b *Breaker, reason rejectReason) {
		t.Helper()
		_, err := b.Allow()
		if oe, ok := errors.AsType[*openError](err); !ok || oe.reason != reason {
			t.Fatalf("Allow: %v, want a refusal for %v", err, reason)
		}
	}
	t.Run("a probe whose done never comes re-opens the circuit, and its late done is stale", func(t *testing.T) {
		b, clock, rec := newTestBreaker(t, testPolicy())
		openIt(t, b, clock)
		clock.Advance(30 * time.Second)
		leaked, err := b.Allow()
		if err != nil {
			t.Fatal(err)
		}
		rec.takeTransitions()
		clock.Advance(30*time.Second - 1)
		wantRefused(t, b, rejectHalfOpenSaturated) // the slot is still held
		wantState(t, b, HalfOpen)
		clock.Advance(1)
		wantRefused(t, b, rejectOpen)
		tr := rec.takeTransitions()
		if len(tr) != 1 || tr[0].From != HalfOpen || tr[0].To != Open || tr[0].Reason != breakerconfig.ReasonTimedOut || tr[0].Err != nil || tr[0].Counts != (Counts{}) {
			t.Fatalf("transitions = %+v", tr)
		}
		reopened := clock.Now()
		if v := b.Verdict(); v.State != Open || !v.Since.Equal(reopened) {
			t.Fatalf("verdict %+v, want a new open period since %v", v, reopened)
		}
		leaked(errBoom) // stale: it belongs to the half-open period that timed out
		wantState(t, b, Open)
		if len(rec.takeTransitions()) != 0 {
			t.Fatal("the late done moved the state")
		}
		if e := rec.ends[len(rec.ends)-1]; e.Outcome != observe.OutcomeIgnored || e.Initial != HalfOpen || e.Final != Open {
			t.Fatalf("late done's call event %+v", e)
		}
		// A new open period of the usual length, then probing as usual.
		clock.Advance(30*time.Second - 1)
		wantState(t, b, Open)
		clock.Advance(1)
		doN(t, b, 2, nil)
		wantState(t, b, Closed)
	})
	t.Run("State alone notices the time-out", func(t *testing.T) {
		b, clock, _ := newTestBreaker(t, testPolicy())
		openIt(t, b, clock)
		clock.Advance(30 * time.Second)
		if _, err := b.Allow(); err != nil {
			t.Fatal(err)
		}
		clock.Advance(30 * time.Second)
		wantState(t, b, Open)
	})
	t.Run("a done after the limit is stale even when nothing noticed the limit first", func(t *testing.T) {
		b, clock, rec := newTestBreaker(t, testPolicy())
		openIt(t, b, clock)
		clock.Advance(30 * time.Second)
		slow, _ := b.Allow()
		clock.Advance(30 * time.Second)
		rec.takeTransitions()
		slow(nil)
		wantCounts(t, b, Counts{})
		if tr := rec.takeTransitions(); len(tr) != 1 || tr[0].To != Open || tr[0].Reason != breakerconfig.ReasonTimedOut {
			t.Fatalf("transitions = %+v", tr)
		}
	})
	t.Run("a slow probe that answers just before the limit counts, and nothing re-opens", func(t *testing.T) {
		b, clock, rec := newTestBreaker(t, testPolicy())
		openIt(t, b, clock)
		clock.Advance(30 * time.Second)
		slow, _ := b.Allow()
		clock.Advance(30*time.Second - 1)
		slow(nil)
		wantCounts(t, b, Counts{Calls: 1, Successes: 1})
		rec.takeTransitions()
		clock.Advance(time.Hour) // no probe is outstanding: no limit runs
		wantState(t, b, HalfOpen)
		if tr := rec.takeTransitions(); len(tr) != 0 {
			t.Fatalf("transitions = %+v", tr)
		}
		doN(t, b, 1, nil)
		wantState(t, b, Closed)
	})
	t.Run("the limit runs from the last admission", func(t *testing.T) {
		p := testPolicy()
		p.HalfOpenPermittedCalls = 2
		b, clock, _ := newTestBreaker(t, p)
		openIt(t, b, clock)
		clock.Advance(30 * time.Second)
		_, _ = b.Allow() // leaks
		clock.Advance(20 * time.Second)
		_, _ = b.Allow() // leaks too, later
		clock.Advance(29 * time.Second)
		wantState(t, b, HalfOpen) // 49s after the first, 29s after the last
		clock.Advance(time.Second)
		wantState(t, b, Open)
	})
	t.Run("two probe slots: one leaks, one succeeds; the free slot carries on", func(t *testing.T) {
		p := testPolicy()
		p.HalfOpenPermittedCalls = 2
		b, clock, _ := newTestBreaker(t, p)
		openIt(t, b, clock)
		clock.Advance(30 * time.Second)
		leaked, _ := b.Allow()
		ok, _ := b.Allow()
		clock.Advance(time.Second)
		ok(nil) // an answer after the last admission: nothing is awaited any more
		clock.Advance(time.Hour)
		wantState(t, b, HalfOpen)
		wantCounts(t, b, Counts{Calls: 1, Successes: 1})
		// The leaked probe holds one slot; the other still admits, and closes the circuit.
		doN(t, b, 1, nil)
		wantState(t, b, Closed)
		leaked(errBoom) // stale
		wantState(t, b, Closed)
		wantCounts(t, b, Counts{})
	})
	t.Run("two probe slots, both leaked: re-opens, and the new period has both slots", func(t *testing.T) {
		p := testPolicy()
		p.HalfOpenPermittedCalls = 2
		b, clock, _ := newTestBreaker(t, p)
		openIt(t, b, clock)
		clock.Advance(30 * time.Second)
		first, _ := b.Allow()
		ok, _ := b.Allow()
		ok(nil)
		second, _ := b.Allow() // leaks, as first does: both slots held
		wantRefused(t, b, rejectHalfOpenSaturated)
		clock.Advance(30 * time.Second)
		wantRefused(t, b, rejectOpen)
		first(nil)
		second(nil)
		clock.Advance(30 * time.Second)
		d1, e1 := b.Allow()
		d2, e2 := b.Allow()
		if e1 != nil || e2 != nil {
			t.Fatalf("slots of the timed-out period still held: %v, %v", e1, e2)
		}
		d1(nil)
		d2(nil)
		wantState(t, b, Closed)
	})
	t.Run("a cancelled probe is an answer", func(t *testing.T) {
		b, clock, _ := newTestBreaker(t, testPolicy())
		openIt(t, b, clock)
		clock.Advance(30 * time.Second)
		doN(t, b, 1, context.Canceled)
		clock.Advance(time.Hour)
		wantState(t, b, HalfOpen)
	})
	t.Run("Update's new OpenTimeout applies to the probe already out", func(t *testing.T) {
		b, clock, _ := newTestBreaker(t, testPolicy())
		openIt(t, b, clock)
		clock.Advance(30 * time.Second)
		_, _ = b.Allow()
		p := testPolicy()
		p.OpenTimeout = 10 * time.Second
		if err := b.Update(p); err != nil {
			t.Fatal(err)
		}
		clock.Advance(10 * time.Second)
		wantState(t, b, Open)
	})
	t.Run("Execute: a probe stuck in fn", func(t *testing.T) {
		b, clock, _ := newTestBreaker(t, testPolicy())
		openIt(t, b, clock)
		clock.Advance(30 * time.Second)
		inside, release, returned := make(chan struct{}), make(chan struct{}), make(chan error)
		go func() {
			returned <- b.Execute(context.Background(), func(context.Context) error {
				close(inside)
				<-release
				return nil
			})
		}()
		<-inside
		clock.Advance(30 * time.Second)
		if err := b.Execute(context.Background(), succeed); !errors.Is(err, ErrOpen) {
			t.Fatalf("Execute while the stuck probe timed out: %v", err)
		}
		close(release)
		if err := <-returned; err != nil {
			t.Fatal(err)
		}
		wantState(t, b, Open) // the stuck probe's success came too late
		wantCounts(t, b, Counts{})
	})
	t.Run("Call: a probe stuck in HalfOpen", func(t *testing.T) {
		b, clock, rec := newTestBreaker(t, testPolicy())
		openIt(t, b, clock)
		clock.Advance(30 * time.Second)
		inside, release, returned := make(chan struct{}), make(chan struct{}), make(chan string)
		cb := Callbacks[string]{
			Closed: func(context.Context) (string, error) { return "closed", nil },
			HalfOpen: func(context.Context) (string, error) {
				close(inside)
				<-release
				return "probe", nil
			},
			Open: func(context.Context, error) (string, error) { return "fallback", nil },
		}
		go func() {
			s, _ := Call(context.Background(), b, cb)
			returned <- s
		}()
		<-inside
		clock.Advance(30 * time.Second)
		if s, _ := Call(context.Background(), b, cb); s != "fallback" {
			t.Fatalf("got %q, want the fallback of a re-opened circuit", s)
		}
		if f := rec.fallbacks[len(rec.fallbacks)-1]; f != "open" {
			t.Fatalf("fallback reason %v", f)
		}
		close(release)
		if s := <-returned; s != "probe" {
			t.Fatalf("stuck probe returned %q", s)
		}
		wantState(t, b, Open)
	})
	t.Run("lock-free path, without a CallObserver", func(t *testing.T) {
		clock := newFakeClock()
		rec := &recorder{}
		b, err := New("plain", testPolicy(), WithClock(clock), WithObserver(transitionsOnly{rec}))
		if err != nil {
			t.Fatal(err)
		}
		b.Trip()
		clock.Advance(30 * time.Second)
		leaked, _ := b.Allow()
		clock.Advance(30 * time.Second)
		if err := b.Execute(context.Background(), succeed); !errors.Is(err, ErrOpen) {
			t.Fatalf("got %v", err)
		}
		leaked(nil)
		wantState(t, b, Open)
		tr := rec.takeTransitions()
		if last := tr[len(tr)-1]; last.From != HalfOpen || last.To != Open || last.Reason != breakerconfig.ReasonTimedOut {
			t.Fatalf("transitions = %+v", tr)
		}
	})
}

// TestProbeThatNeverReturns: a probe whose function panics or calls runtime.Goexit (t.FailNow
// in a test) still gives its slot back; only a done that is never called at all needs the
// time-out of TestLeakedProbe.
func TestProbeThatNeverReturns(t *testing.T) {
	t.Run("runtime.Goexit frees the slot and counts as neither", func(t *testing.T) {
		b, clock, _ := newTestBreaker(t, testPolicy())
		openIt(t, b, clock)
		clock.Advance(30 * time.Second)
		exited := make(chan struct{})
		go func() {
			defer close(exited)
			_ = b.Execute(context.Background(), func(context.Context) error {
				runtime.Goexit()
				return nil
			})
		}()
		<-exited
		wantState(t, b, HalfOpen)
		wantCounts(t, b, Counts{})
		doN(t, b, 2, nil) // the slot is free: two probes in a row close it
		wantState(t, b, Closed)
	})
	t.Run("a panic is a failed probe", func(t *testing.T) {
		b, clock, _ := newTestBreaker(t, testPolicy())
		openIt(t, b, clock)
		clock.Advance(30 * time.Second)
		func() {
			defer func() { _ = recover() }()
			_ = b.Execute(context.Background(), func(context.Context) error { panic("probe bug") })
		}()
		wantState(t, b, Open)
		clock.Advance(30 * time.Second)
		doN(t, b, 2, nil)
		wantState(t, b, Closed)
	})
}
