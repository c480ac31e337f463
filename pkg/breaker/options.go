package breaker

import (
	"context"
	"errors"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker/internal/core"
	"github.com/fusebox-dev/fusebox/pkg/breaker/observe"
)

// Clock tells the time. Tests inject a fake one with [WithClock].
type Clock interface{ Now() time.Time }

// Option configures a breaker at [New]; package registry hands its options to every
// breaker it creates.
type Option func(*core.Options)

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
func WithClock(c Clock) Option { return func(o *core.Options) { o.Clock = c } }

// WithClassifier decides which non-nil errors count as failures; an error it does not count
// is a success (a 4xx answer proves the dependency is up), except context.Canceled, which is
// then neither. nil restores the default: every error but context.Canceled is a failure.
func WithClassifier(isFailure func(error) bool) Option {
	return func(o *core.Options) { o.IsFailure = isFailure }
}

// WithObserver adds an observer; it may be given several times. An observer that also
// implements [observe.CallObserver] sees every call, fallback and retry.
func WithObserver(obs observe.Observer) Option {
	return func(o *core.Options) {
		if obs != nil {
			o.Observers = append(o.Observers, obs)
		}
	}
}

// isFailureByDefault is the default classifier: every error but context.Canceled is a
// failure.
func isFailureByDefault(err error) bool {
	return err != nil && !errors.Is(err, context.Canceled)
}
