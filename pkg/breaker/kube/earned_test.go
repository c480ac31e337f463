package kube

import (
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/observe"
)

// heldReporter returns a reporter whose unearned changes are held for hold, with the
// breakers of names in its report, closed since start and written.
func heldReporter(t *testing.T, hold time.Duration, names ...string) *reporter {
	t.Helper()
	r := &reporter{wake: make(chan struct{}, 1), entries: map[string]*entry{}, holdFor: func() time.Duration { return hold }}
	t.Cleanup(func() { r.mu.Lock(); r.hold.end(); r.mu.Unlock() })
	for _, name := range names {
		e := r.entry(name)
		e.reported, e.known = true, true
		e.want = member{state: breaker.Closed, reason: breakerconfig.ReasonStarted, generation: 1}
	}
	r.holdFor = nil // the first report goes at once here; its hold is tested below
	ns, ms, dirty := r.pending()
	if !dirty {
		t.Fatal("the first report is not to be written")
	}
	r.markWritten(ns, ms)
	r.holdFor = func() time.Duration { return hold }
	return r
}

var at = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func adopt(r *reporter, name string, period uint64) {
	r.OnTransition(observe.Transition{Breaker: name, From: breaker.Closed, To: breaker.Open, At: at, Period: period, Reason: breakerconfig.ReasonAdopted})
}

func drain(r *reporter) {
	select {
	case <-r.wake:
	default:
	}
}

// TestUnearnedChangesWaitForAnEarnedOne: an adopted verdict is not written on its own
// while its hold runs; an earned state written meanwhile takes it along, and the hold
// that write ended never fires.
func TestUnearnedChangesWaitForAnEarnedOne(t *testing.T) {
	r := heldReporter(t, time.Hour, "a", "b")
	adopt(r, "a", 1)
	if _, _, dirty := r.pending(); dirty {
		t.Fatal("an adopted verdict is to be written at once")
	}
	if r.hold.timer == nil {
		t.Fatal("no hold runs for the adopted verdict")
	}
	r.OnTransition(observe.Transition{Breaker: "b", From: breaker.Closed, To: breaker.Open, At: at, Period: 1,
		Reason: breakerconfig.ReasonTripped, Counts: breaker.Counts{Calls: 10, Failures: 10}})
	names, ms, dirty := r.pending()
	if !dirty {
		t.Fatal("a tripped breaker is held")
	}
	for i, want := range []string{breakerconfig.ReasonAdopted, breakerconfig.ReasonTripped} {
		if names[i] != []string{"a", "b"}[i] || ms[i].reason != want {
			t.Errorf("entry %s: reason %s, want %s", names[i], ms[i].reason, want)
		}
	}
	r.markWritten(names, ms)
	if r.hold.timer != nil || r.hold.over {
		t.Errorf("hold %+v after the write that took its change", r.hold)
	}
	// Unchanged earned entries do not make a later unearned change urgent.
	r.OnTransition(observe.Transition{Breaker: "a", From: breaker.Open, To: breaker.HalfOpen, At: at.Add(time.Second), Period: 2, Reason: breakerconfig.ReasonTimedOut})
	if _, _, dirty := r.pending(); dirty {
		t.Error("a timed-out breaker beside an unchanged tripped one is written at once")
	}
}

// TestHeldChangesAreWrittenWhenTheHoldEnds: the hold's end wakes the writer and the held
// changes, coalesced, are then due; a new hold starts with the next unearned change.
func TestHeldChangesAreWrittenWhenTheHoldEnds(t *testing.T) {
	const hold = 30 * time.Millisecond
	r := heldReporter(t, hold, "a")
	drain(r)
	start := time.Now()
	adopt(r, "a", 1)
	if _, _, dirty := r.pending(); dirty {
		t.Fatal("an adopted verdict is to be written at once")
	}
	drain(r) // OnTransition's own wake-up
	r.OnTransition(observe.Transition{Breaker: "a", From: breaker.Open, To: breaker.HalfOpen, At: at.Add(time.Second), Period: 2, Reason: breakerconfig.ReasonTimedOut})
	if _, _, dirty := r.pending(); dirty {
		t.Fatal("a second unearned change is written before the hold ends")
	}
	drain(r)
	select {
	case <-r.wake:
	case <-time.After(10 * time.Second):
		t.Fatal("the hold's end never woke the writer")
	}
	if waited := time.Since(start); waited < hold {
		t.Errorf("woken after %v, before the hold of %v ended", waited, hold)
	}
	names, ms, dirty := r.pending()
	if !dirty || ms[0].state != breaker.HalfOpen || ms[0].reason != breakerconfig.ReasonTimedOut {
		t.Fatalf("after the hold: dirty %v, %v %+v; want the half-open state, once", dirty, names, ms)
	}
	r.markWritten(names, ms)
	adopt(r, "a", 3)
	if _, _, dirty := r.pending(); dirty {
		t.Error("the next adopted verdict is not held")
	}
}

// TestWhatGoesAtOnce: besides earned states, a new config generation or refusal, a
// breaker leaving the report and a Group's entry are not held; a new breaker's Started
// entry is.
func TestWhatGoesAtOnce(t *testing.T) {
	for name, change := range map[string]func(r *reporter){
		"generation": func(r *reporter) { adopt(r, "a", 1); r.entries["a"].want.generation = 2 },
		"refusal":    func(r *reporter) { r.entries["a"].want.configErr = "bad" },
		"removed":    func(r *reporter) { r.unconfigure("a") },
		"group":      func(r *reporter) { r.entries["a"].want.group = true; r.entries["a"].want.keys = 1 },
		"new refused": func(r *reporter) {
			e := r.entry("c")
			e.reported, e.known = true, true
			e.want = member{reason: breakerconfig.ReasonStarted, generation: 1, configErr: "bad"}
		},
		"probes succeeded": func(r *reporter) {
			r.OnTransition(observe.Transition{Breaker: "a", From: breaker.HalfOpen, To: breaker.Closed, At: at, Period: 1, Reason: breakerconfig.ReasonProbesSucceeded})
		},
	} {
		t.Run(name, func(t *testing.T) {
			r := heldReporter(t, time.Hour, "a", "b")
			change(r)
			if _, _, dirty := r.pending(); !dirty {
				t.Error("held")
			}
		})
	}
	r := heldReporter(t, time.Hour, "a")
	e := r.entry("c")
	e.reported, e.known = true, true
	e.want = member{reason: breakerconfig.ReasonStarted, generation: 1}
	if _, _, dirty := r.pending(); dirty {
		t.Error("a new breaker's Started entry is written at once")
	}
}

func TestUnearnedDelayBounds(t *testing.T) {
	lo, hi := maxUnearnedDelay, minUnearnedDelay
	for range 2000 {
		d := unearnedDelay()
		if d < minUnearnedDelay || d >= maxUnearnedDelay {
			t.Fatalf("hold %v outside [%v, %v)", d, minUnearnedDelay, maxUnearnedDelay)
		}
		lo, hi = min(lo, d), max(hi, d)
	}
	// Jittered: 2,000 draws spread over most of the range.
	if hi-lo < (maxUnearnedDelay-minUnearnedDelay)*9/10 {
		t.Errorf("2,000 holds span only %v to %v", lo, hi)
	}
}

// TestAnEchoOfTheWrittenStateIsNotWritten: a pod that tripped and then adopts the fleet's
// verdict, which only re-times its open period (no transition), has nothing to tell: no
// write and no hold, however long it waits; the next write for another reason carries it.
// A new transition to the same state and reason is news, and goes at once.
func TestAnEchoOfTheWrittenStateIsNotWritten(t *testing.T) {
	const hold = 20 * time.Millisecond
	r := heldReporter(t, hold, "b")
	br, err := breaker.New("a", breaker.Policy{OpenTimeout: time.Hour}, breaker.WithObserver(r))
	if err != nil {
		t.Fatal(err)
	}
	r.configure(br, 1, "", sampled{})
	br.Trip()
	names, ms, dirty := r.pending()
	if !dirty || ms[0].reason != breakerconfig.ReasonManual {
		t.Fatalf("a tripped breaker is not written at once: dirty %v, %+v", dirty, ms)
	}
	r.markWritten(names, ms)

	// The fleet's verdict: the same open state, since a second earlier.
	earlier := ms[0].since.Add(-time.Second)
	br.Adopt(breaker.Verdict{State: breaker.Open, Since: earlier})
	r.configure(br, 1, "", sampled{})
	if got := r.entries["a"].want.since; !got.Equal(earlier) {
		t.Fatalf("the re-timing was not taken: since %v, want %v", got, earlier)
	}
	if _, _, dirty := r.pending(); dirty {
		t.Fatal("the echo of a written Open is to be written at once")
	}
	if r.hold.timer != nil {
		t.Fatal("a hold runs for the echo of a written Open")
	}
	time.Sleep(3 * hold)
	if _, _, dirty := r.pending(); dirty {
		t.Fatal("the echo of a written Open is written after a wait")
	}

	// b adopts an Open: that is held, and when written carries a's echo along.
	adopt(r, "b", 1)
	if _, _, dirty := r.pending(); dirty {
		t.Fatal("b's adopted Open is not held")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		names, ms, dirty = r.pending()
		if dirty || time.Now().After(deadline) {
			break
		}
		time.Sleep(hold / 4)
	}
	if !dirty {
		t.Fatal("b's held change never came due")
	}
	if !ms[0].since.Equal(earlier) {
		t.Errorf("a's entry %+v does not carry its echo", ms[0])
	}
	r.markWritten(names, ms)

	// A new open period of the same state and reason (half-open, then tripped again) is
	// a transition, and earned: it goes at once.
	r.OnTransition(observe.Transition{Breaker: "a", From: breaker.HalfOpen, To: breaker.Open, At: at.Add(time.Hour), Period: 1 << 20, Reason: breakerconfig.ReasonManual})
	if _, ms, dirty := r.pending(); !dirty || ms[0].reason != breakerconfig.ReasonManual {
		t.Fatalf("a new Manual open period is held: dirty %v, %+v", dirty, ms)
	}
}
