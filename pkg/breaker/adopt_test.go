package breaker

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/internal/core"
	"github.com/fusebox-dev/fusebox/pkg/breaker/observe"
)

func TestAdopt(t *testing.T) {
	t.Run("Open from closed keeps the tally and times out from Since", func(t *testing.T) {
		b, clock, rec := newTestBreaker(t, testPolicy())
		doN(t, b, 4, errBoom)
		since := clock.Now().Add(-10 * time.Second)
		if !b.Adopt(Verdict{State: Open, Since: since}) {
			t.Fatal("Adopt(Open) did not change the state")
		}
		tr := rec.takeTransitions()
		if len(tr) != 1 || tr[0].Reason != breakerconfig.ReasonAdopted || !tr[0].At.Equal(since) || tr[0].Counts != (Counts{Calls: 4, Failures: 4}) {
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
	obs := observerFunc(func(tr observe.Transition) {
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
	want := []observe.Outcome{observe.OutcomeSuccess, observe.OutcomeIgnored, observe.OutcomeFailure}
	for i, o := range want {
		if rec.ends[i].Outcome != o {
			t.Errorf("event %d: %v, want %v", i, rec.ends[i].Outcome, o)
		}
	}
	last := rec.ends[20]
	if last.Initial != Closed || last.Final != Open || last.Outcome != observe.OutcomeFailure {
		t.Fatalf("opening call: %+v", last)
	}
	if r := rec.ends[21]; r.Outcome != observe.OutcomeRejected || !errors.Is(r.Err, ErrOpen) || refusedIn(r.Err) != Open {
		t.Fatalf("rejected call: %+v", r)
	}
}

func TestStrings(t *testing.T) {
	checks := map[fmt.Stringer]string{
		Closed: "closed", Open: "open", HalfOpen: "half_open",
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
	if d := time.Duration(core.CoarseNow() - time.Now().UnixNano()); d > 0 || d < -time.Second {
		t.Fatalf("coarse clock is %v off the wall clock", d)
	}
	b.Trip()
	// The coarse clock may lag the exact opening time by about a tick.
	if d, ok := b.RetryAfter(); !ok || d <= 29*time.Second || d > 30*time.Second+100*time.Millisecond {
		t.Fatalf("RetryAfter = %v, %v", d, ok)
	}
}
