package breakertest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakertest"
	"github.com/fusebox-dev/fusebox/pkg/breaker/observe"
)

func tr(name string, period uint64, from, to breaker.State) observe.Transition {
	return observe.Transition{Breaker: name, Period: period, From: from, To: to, Reason: breakerconfig.ReasonManual}
}

// Deliveries from different goroutines may arrive out of order; the Recorder keeps each
// breaker's transitions in the order the breaker made them.
func TestRecorderOrdersByPeriod(t *testing.T) {
	var rec breakertest.Recorder
	rec.OnTransition(tr("a", 1, breaker.Closed, breaker.Open))
	rec.OnTransition(tr("b", 1, breaker.Closed, breaker.Open))
	rec.OnTransition(tr("a", 3, breaker.HalfOpen, breaker.Closed))
	rec.OnTransition(tr("b", 2, breaker.Open, breaker.Open))
	rec.OnTransition(tr("a", 2, breaker.Open, breaker.HalfOpen))
	var got []string
	for _, t := range rec.Transitions() {
		got = append(got, fmt.Sprintf("%s%d", t.Breaker, t.Period))
	}
	if want := "a1 b1 a2 a3 b2"; strings.Join(got, " ") != want {
		t.Fatalf("order %v, want %s", got, want)
	}
}

func TestRecorderUnderConcurrentTransitions(t *testing.T) {
	var made atomic.Int64
	b, clock, rec := newBreaker(t, nil, breaker.WithObserver(observerFunc(func(observe.Transition) { made.Add(1) })))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				// Past the open timeout a Trip finds the circuit half-open and re-opens
				// it; a Trip on a circuit still open is no transition.
				b.Trip()
				clock.Advance(time.Minute)
				_ = b.State()
				_ = rec.States()
			}
		})
	}
	wg.Wait()
	ts := rec.Transitions()
	if n := int(made.Load()); n < 2 || len(ts) != n || rec.Len() != n {
		t.Fatalf("recorded %d transitions (Len %d), the breaker made %d", len(ts), rec.Len(), n)
	}
	for i, tr := range ts {
		if tr.Period != uint64(i+1) {
			t.Fatalf("transition %d has period %d: out of order", i, tr.Period)
		}
	}
	rec.Reset()
	if _, ok := rec.Last(); ok || rec.Len() != 0 {
		t.Fatal("Reset kept transitions")
	}
}

func TestWait(t *testing.T) {
	b, clock, rec := newBreaker(t, nil)
	go func() {
		time.Sleep(5 * time.Millisecond) // let Wait block first, most of the time
		b.Trip()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := rec.Wait(ctx, breaker.Open)
	if err != nil {
		t.Fatal(err)
	}
	if got.Period != 1 || got.Reason != breakerconfig.ReasonManual {
		t.Fatalf("Wait returned %+v, want the trip", got)
	}

	// The same open is not returned twice: a second Wait waits for a second open.
	short, cancelShort := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancelShort()
	if _, err := rec.Wait(short, breaker.Open); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "closed→open") {
		t.Fatalf("second Wait: %v, want a deadline naming what was seen", err)
	}
	// Trip on an open circuit is no transition; once time has made it half-open, it is.
	b.Trip()
	clock.Advance(time.Minute)
	b.Trip()
	if got, err := rec.Wait(ctx, breaker.Open); err != nil || got.Period != 3 {
		t.Fatalf("Wait after a second trip: %+v, %v; want period 3 (after open → half-open)", got, err)
	}
}

func TestWaitReturnsTransitionsInOrder(t *testing.T) {
	var rec breakertest.Recorder
	rec.OnTransition(tr("a", 3, breaker.HalfOpen, breaker.Open))
	rec.OnTransition(tr("a", 1, breaker.Closed, breaker.Open))
	ctx := context.Background()
	for _, want := range []uint64{1, 3} {
		if got, err := rec.Wait(ctx, breaker.Open); err != nil || got.Period != want {
			t.Fatalf("Wait: period %d, %v; want %d", got.Period, err, want)
		}
	}
}

// fakeTB catches what AssertStates reports. testing.TB cannot be implemented outside the
// testing package but by embedding it; the methods not overridden are never called.
type fakeTB struct {
	testing.TB
	errors []string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Errorf(format string, args ...any) {
	f.errors = append(f.errors, fmt.Sprintf(format, args...))
}

func TestAssertStates(t *testing.T) {
	b, clock, rec := newBreaker(t, nil)
	if err := breakertest.HalfOpen(b, clock); err != nil {
		t.Fatal(err)
	}
	if err := breakertest.OpenByFailures(b, errBoom); err != nil {
		t.Fatal(err)
	}

	var ok fakeTB
	if !rec.AssertStates(&ok, "closed->open", "open->half_open", "half_open→open") || len(ok.errors) != 0 {
		t.Fatalf("matching sequence reported: %q", ok.errors)
	}

	var bad fakeTB
	if rec.AssertStates(&bad, "closed→open", "open→half_open", "half_open→closed") {
		t.Fatal("AssertStates returned true on a mismatch")
	}
	want := "breaker transitions differ (-want +got):\n" +
		"  closed→open  (Manual)\n" +
		"  open→half_open  (TimedOut)\n" +
		"- half_open→closed\n" +
		"+ half_open→open  (ProbeFailed, FailedProbe, 1 calls 1 failures 0 successes)\n"
	if len(bad.errors) != 1 || bad.errors[0] != want {
		t.Fatalf("reported %q\nwant %q", bad.errors, want)
	}
}

func TestDiff(t *testing.T) {
	var rec breakertest.Recorder
	if d := rec.Diff(); d != "" {
		t.Fatalf("empty against empty: %q", d)
	}
	rec.OnTransition(tr("a", 1, breaker.Closed, breaker.Open))
	rec.OnTransition(tr("a", 2, breaker.Open, breaker.Open))
	for _, tc := range []struct {
		want []string
		diff string
	}{
		{[]string{"closed→open", "open→open"}, ""},
		{nil, "+ closed→open  (Manual)\n+ open→open  (Manual)\n"},
		{[]string{"closed→open"}, "  closed→open  (Manual)\n+ open→open  (Manual)\n"},
		{[]string{"open→open"}, "+ closed→open  (Manual)\n  open→open  (Manual)\n"},
		{[]string{"closed→open", "open→half_open", "open→open"}, "  closed→open  (Manual)\n- open→half_open\n  open→open  (Manual)\n"},
		{[]string{"half_open→closed"}, "- half_open→closed\n+ closed→open  (Manual)\n+ open→open  (Manual)\n"},
	} {
		if d := rec.Diff(tc.want...); d != tc.diff {
			t.Errorf("Diff(%q) = %q, want %q", tc.want, d, tc.diff)
		}
	}
}

// A Recorder checks the whole sequence a scenario makes; in a test, AssertStates(t, ...)
// reports the Diff.
func ExampleRecorder() {
	clock := breakertest.NewClock(time.Now())
	rec := &breakertest.Recorder{}
	b, _ := breaker.New("payments", breaker.DefaultPolicy(), breaker.WithClock(clock), breaker.WithObserver(rec))
	_ = breakertest.OpenByFailures(b, nil)
	_ = breakertest.HalfOpen(b, clock)
	_ = breakertest.OpenByFailures(b, nil) // a probe fails

	fmt.Println(rec.States())
	fmt.Print(rec.Diff("closed->open", "open->half_open", "half_open->closed"))
	// Output:
	// [closed→open open→half_open half_open→open]
	//   closed→open  (Tripped, FailureRate, 20 calls 20 failures 0 successes)
	//   open→half_open  (TimedOut)
	// - half_open→closed
	// + half_open→open  (ProbeFailed, FailedProbe, 1 calls 1 failures 0 successes)
}

// Wait waits for a transition another goroutine makes.
func ExampleRecorder_Wait() {
	rec := &breakertest.Recorder{}
	b, _ := breaker.New("payments", breaker.DefaultPolicy(), breaker.WithObserver(rec))
	go b.Trip() // the code under test, in the background

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	t, err := rec.Wait(ctx, breaker.Open)
	fmt.Println(breakertest.Arrow(t), t.Reason, err)
	// Output: closed→open Manual <nil>
}

// observerFunc is a function used as an Observer.
type observerFunc func(observe.Transition)

func (f observerFunc) OnTransition(t observe.Transition) { f(t) }
