package breaker

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker/internal/fakeclock"
	"github.com/fusebox-dev/fusebox/pkg/breaker/observe"
)

func newFakeClock() *fakeclock.Clock {
	return fakeclock.NewClock(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
}

var (
	errBoom   = errors.New("boom")
	errBenign = errors.New("benign: the dependency answered, just not with what we wanted")
)

// recorder is an Observer and CallObserver that keeps everything it is told.
type recorder struct {
	mu          sync.Mutex
	transitions []observe.Transition
	ends        []observe.CallEvent
	starts      int
	fallbacks   []string // fallbackReason of each
	retries     []bool
}

var _ observe.CallObserver = (*recorder)(nil)

func (r *recorder) OnTransition(t observe.Transition) {
	r.mu.Lock()
	r.transitions = append(r.transitions, t)
	r.mu.Unlock()
}

func (r *recorder) OnCallStart(string, State) {
	r.mu.Lock()
	r.starts++
	r.mu.Unlock()
}

func (r *recorder) OnCallEnd(e observe.CallEvent) {
	r.mu.Lock()
	r.ends = append(r.ends, e)
	r.mu.Unlock()
}

func (r *recorder) OnFallback(ev observe.CallEvent) {
	r.mu.Lock()
	r.fallbacks = append(r.fallbacks, fallbackReason(ev))
	r.mu.Unlock()
}

func (r *recorder) OnRetry(_ string, allowed bool) {
	r.mu.Lock()
	r.retries = append(r.retries, allowed)
	r.mu.Unlock()
}

// fallbackReason names why Call ran the fallback ev describes, as otelbreaker's
// breaker.fallbacks counter does: "open", "half_open_saturated", "concurrency_limited" or "failure".
func fallbackReason(ev observe.CallEvent) string {
	switch {
	case ev.Outcome != observe.OutcomeRejected:
		return "failure"
	case errors.Is(ev.Err, ErrConcurrencyLimited):
		return "concurrency_limited"
	case ev.Initial == HalfOpen:
		return "half_open_saturated"
	}
	return "open"
}

func (r *recorder) takeTransitions() []observe.Transition {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.transitions
	r.transitions = nil
	return t
}

// transitionsOnly hides the CallObserver side of a recorder, to exercise the lock-free path.
type transitionsOnly struct{ r *recorder }

func (t transitionsOnly) OnTransition(tr observe.Transition) { t.r.OnTransition(tr) }

// observerFunc is a function used as an Observer.
type observerFunc func(observe.Transition)

func (f observerFunc) OnTransition(t observe.Transition) { f(t) }

// raceDetector is whether the tests run under -race (race_test.go).
var raceDetector bool

// oneGoroutine skips, under -race, a test that drives breakers from one goroutine on a
// fake clock: the race detector has nothing to find there and makes such a test ten to
// twenty times slower. make test runs this package a second time without -race, where
// the test runs (Makefile, UNRACED_PKGS).
func oneGoroutine(t *testing.T) {
	t.Helper()
	if raceDetector {
		t.Skip("one goroutine on a fake clock: run without -race (make test does)")
	}
}
