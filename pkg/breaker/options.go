package breaker

import (
	"context"
	"errors"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker/observe"
)

// Clock tells the time. Tests inject a fake one with [WithClock].
type Clock interface{ Now() time.Time }

// monotonicClock is a Clock that also reads a monotonic clock, one that a step of the wall
// clock does not move: a Clock with a Monotonic method (see WithClock).
type monotonicClock interface {
	Clock
	Monotonic() time.Duration
}

// Option configures a breaker at [New].
type Option func(*options)

type options struct {
	clock     Clock
	isFailure func(error) bool
	observers []observe.Observer
}

// WithClock makes the breaker read time from c on every call instead of from the shared
// coarse clock; tests use it to move time by hand. Every reading goes through c, so a slow
// Clock slows the call path. Timestamps that leave the breaker (Transition.At, Verdict.Since)
// are c.Now(). Durations (windows, open periods) are measured on a monotonic clock, one that
// a step of the wall clock does not move: when c also has a method Monotonic()
// time.Duration (only the difference between two readings meaning anything), on its
// readings, and otherwise on the difference between its Now readings, which Go takes on the
// monotonic clock when both times carry a monotonic reading (those of time.Now do) and on
// the wall clock when they do not (those of time.Date or time.Unix). [breakertest.Clock]
// has Monotonic, and a wall clock a test can step alone.
//
// [breakertest.Clock]: https://pkg.go.dev/github.com/fusebox-dev/fusebox/pkg/breaker/breakertest#Clock
func WithClock(c Clock) Option { return func(o *options) { o.clock = c } }

// WithClassifier decides which non-nil errors count as failures; an error it does not count
// is a success (a 4xx answer proves the dependency is up), except context.Canceled, which is
// then neither. nil restores the default: every error but context.Canceled is a failure.
func WithClassifier(isFailure func(error) bool) Option {
	return func(o *options) { o.isFailure = isFailure }
}

// WithObserver adds an observer; it may be given several times. An observer that also
// implements [observe.CallObserver] sees every call.
func WithObserver(obs observe.Observer) Option {
	return func(o *options) {
		if obs != nil {
			o.observers = append(o.observers, obs)
		}
	}
}

// isFailureByDefault is the default classifier: every error but context.Canceled is a
// failure.
func isFailureByDefault(err error) bool {
	return err != nil && !errors.Is(err, context.Canceled)
}
