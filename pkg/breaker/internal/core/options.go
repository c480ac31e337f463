package core

import (
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker/observe"
)

// Clock tells the time: breaker.Clock, the interface a test injects with breaker.WithClock.
type Clock interface{ Now() time.Time }

// monotonicClock is a Clock that also reads a monotonic clock, one that a step of the wall
// clock does not move (see breaker.WithClock).
type monotonicClock interface {
	Clock
	Monotonic() time.Duration
}

// Options are what a breaker is built with; each breaker.Option sets one.
type Options struct {
	// Clock is the injected clock; nil means the coarse clock and time.Now.
	Clock Clock
	// IsFailure is the classifier; nil means every error but context.Canceled.
	IsFailure func(error) bool
	// Observers are told of transitions, and those that implement observe.CallObserver of
	// calls.
	Observers []observe.Observer
}

// Apply returns the options opts set, in order.
func Apply[O ~func(*Options)](opts []O) Options {
	var o Options
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// Copy returns a pointer to a copy of *p, or nil: how a policy's pointer fields are made
// its own, so that whoever handed the policy in cannot change it by writing through them.
func Copy[T any](p *T) *T {
	if p == nil {
		return nil
	}
	c := *p
	return &c
}
