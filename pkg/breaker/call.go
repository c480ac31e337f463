package breaker

import (
	"context"
	"errors"

	"github.com/fusebox-dev/fusebox/pkg/breaker/observe"
)

// Callbacks are call(open, close, halfOpen) of utopia-php/circuit-breaker, the PHP
// library whose semantics Fusebox follows (docs/design.md). Closed is the protected call
// and is required. HalfOpen, if set, replaces Closed for probes, for example with a shorter timeout.
// Open is the fallback: it runs when the call is short-circuited (cause matches ErrOpen),
// when the concurrency limit refuses it (cause matches ErrConcurrencyLimited), or when the
// protected callback fails (cause is the failure); with Open nil, the error is returned as
// it is.
type Callbacks[T any] struct {
	Closed   func(ctx context.Context) (T, error)
	HalfOpen func(ctx context.Context) (T, error)
	Open     func(ctx context.Context, cause error) (T, error)
}

// errNoClosedCallback is returned by Call when Callbacks.Closed is nil: a mistake in the
// caller's code, not something to branch on.
var errNoClosedCallback = errors.New("breaker: Callbacks.Closed is nil")

// Call runs cb through b. The fallback runs only for short-circuits and failures: an error
// the classifier does not count as a failure (a 4xx, context.Canceled) is returned as it is.
// A failure that was not recorded (a stale result, a MetricsOnly call) still gets the
// fallback, since the caller's call did fail. A panic is recorded as a failure and re-raised.
func Call[T any](ctx context.Context, b *Breaker, cb Callbacks[T]) (T, error) {
	if cb.Closed == nil {
		var zero T
		return zero, errNoClosedCallback
	}
	t, err := b.admit(ctx)
	if err != nil {
		if cb.Open == nil {
			var zero T
			return zero, err
		}
		if len(b.callObs) > 0 {
			s := refusedIn(err)
			b.notifyFallback(observe.CallEvent{Breaker: b.name, Outcome: observe.OutcomeRejected, Initial: s, Final: s, Err: err})
		}
		return cb.Open(ctx, err)
	}
	fn := cb.Closed
	if t.recorded && t.p.state == HalfOpen && cb.HalfOpen != nil {
		fn = cb.HalfOpen
	}
	res, failed, err := runTicket(ctx, b, t, fn)
	if failed && cb.Open != nil {
		if len(b.callObs) > 0 {
			b.notifyFallback(observe.CallEvent{Breaker: b.name, Outcome: observe.OutcomeFailure, Initial: t.p.state, Final: b.cur.Load().state, Err: err})
		}
		return cb.Open(ctx, err)
	}
	return res, err
}

// runTicket runs fn for the admitted call t and records its outcome; failed says the
// breaker recorded a failure.
func runTicket[T any](ctx context.Context, b *Breaker, t ticket, fn func(context.Context) (T, error)) (res T, failed bool, err error) {
	start := b.startOf(t)
	completed := false
	defer func() {
		if !completed {
			// recover works only when called by the deferred function itself.
			b.abandon(t, recover(), start)
		}
	}()
	res, err = fn(ctx)
	completed = true
	failed = b.finish(t, err, false, start)
	return res, failed, err
}

func (b *Breaker) notifyFallback(ev observe.CallEvent) {
	for _, co := range b.callObs {
		co.OnFallback(ev)
	}
}

// refusedIn is the state a refusal (an openError or limitError of b's) was made in:
// half-open for the probe cap, closed for throttling, the circuit's for the concurrency
// limit, else open.
func refusedIn(err error) State {
	if s, ok := limitedIn(err); ok {
		return s
	}
	if oe, ok := err.(*openError); ok {
		switch oe.reason {
		case rejectHalfOpenSaturated:
			return HalfOpen
		case rejectThrottled:
			return Closed
		}
	}
	return Open
}
