package breaker

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker/observe"
)

// The retry budget (docs/design.md §5.15): over the window, a pod's retries are at most
// Percent% of its first attempts plus its share of the fleet's floor, MinPerSecond × window
// / pods. AllowRetry takes one retry from it; Retry is the loop most callers want.

// retryAfterer is an error that says how long its source asked to be left alone: an HTTP
// 429 or 503 with Retry-After, for example (httpbreaker's StatusError). Retry waits that
// long before the next attempt instead of its own backoff.
type retryAfterer interface {
	error
	RetryAfter() time.Duration
}

// retryBudgetError is the error of a retry the budget refused: errors.Is matches both
// ErrRetryBudget and the last attempt's error.
type retryBudgetError struct {
	breaker string
	last    error
}

func (e *retryBudgetError) Error() string {
	return "breaker " + quote(e.breaker) + ": retry budget spent; last attempt: " + e.last.Error()
}

// Unwrap returns ErrRetryBudget and the last attempt's error.
func (e *retryBudgetError) Unwrap() []error { return []error{ErrRetryBudget, e.last} }

// AllowRetry takes one retry from the budget (§5.15): false when the budget is spent, or
// while the circuit refuses calls (open under Enforce, or ForcedOpen). With no RetryBudget,
// and while half-open (the probe cap bounds retries then), it always allows. The retry
// itself is then a call like any other, made through Execute, Allow or Call.
func (b *Breaker) AllowRetry() bool {
	ok, refusal := b.takeRetry()
	return ok && refusal == nil
}

// takeRetry is AllowRetry, telling a refusal of the circuit (refusal, the error Execute
// would return) from one of the budget (ok false).
func (b *Breaker) takeRetry() (ok bool, refusal error) {
	p := b.cur.Load()
	if p.retryRefusal != nil && b.now() < p.halfOpenAt {
		return false, p.retryRefusal
	}
	if p.budget == nil || p.tally == nil {
		return true, nil
	}
	now := b.now()
	for {
		bk, retries, calls := p.tally.retriesAndCalls(now, b.bucket.Load())
		share := b.retryFloorShare(p, p.tally.span(now, bk))
		// First attempts are requests − throttled − retries, that is calls − retries.
		if float64(retries+1) > p.retryShare*float64(max(calls-retries, 0))+share {
			b.notifyRetry(false)
			return false, nil
		}
		if r := bk.retries.Load(); bk.retries.CompareAndSwap(r, r+1) {
			b.notifyRetry(true)
			return true, nil
		}
	}
}

// retryFloorShare is this pod's share of the fleet's floor over the span the window covers
// (tally.span, in nanoseconds): MinPerSecond × span / pods, with pods 1 until the operator
// has said how many there are. Scaling the floor with the span, rather than granting one
// window's worth over a window that covers up to two, makes it a rate: the fleet's floor
// retries come to MinPerSecond a second, not half of it.
func (b *Breaker) retryFloorShare(p *period, span int64) float64 {
	pods := 1
	if f := b.fleet.Load(); f != nil && f.Pods > 0 {
		pods = f.Pods
	}
	return p.floorPerNano * float64(span) / float64(pods)
}

func (b *Breaker) notifyRetry(allowed bool) {
	for _, co := range b.callObs {
		co.OnRetry(b.name, allowed)
	}
}

// RetryOption configures [Retry].
type RetryOption func(*retryOptions)

type retryOptions struct {
	base, cap time.Duration
}

// maxRetryAfter bounds the Retry-After Retry honours: an error that asks for a longer wait
// ends the retries, returned as it is, since the caller is better told now than after a
// wait it did not plan for.
const maxRetryAfter = 30 * time.Second

// WithBackoff sets Retry's exponential backoff: the n-th retry waits a uniformly random
// time up to min(base × 2^(n-1), ceiling) ("full jitter", which spreads a fleet's retries
// best). The default is a 50ms base and a 2s cap; WithBackoff(0, 0) retries at once.
func WithBackoff(base, ceiling time.Duration) RetryOption {
	return func(o *retryOptions) { o.base, o.cap = base, ceiling }
}

// Retry runs fn through b up to attempts times (at least once), retrying a failure (as b's
// classifier judges it) while the retry budget allows, after a jittered exponential backoff,
// or the wait an error asks for: one with a method RetryAfter() time.Duration, as
// httpbreaker's StatusError has for a Retry-After header (a wait over 30s ends the retries,
// the error returned as it is). It returns nil on a success; otherwise
// the last attempt's error as it is when it is not a failure (a 4xx, context.Canceled),
// when attempts are used up, or when the breaker refused the call (ErrOpen, ErrThrottled:
// nothing is retried while open; ErrConcurrencyLimited: a retry would only add to the calls
// in flight the limit is there to bound); an error matching both ErrRetryBudget and the last
// attempt's when the budget refused the retry;
// and when ctx ends during a wait, an error matching both ctx.Err() and the last attempt's.
// Each retry is a call like any other: admitted, counted and judged by b.
func Retry(ctx context.Context, b *Breaker, attempts int, fn func(context.Context) error, opts ...RetryOption) error {
	o := retryOptions{base: 50 * time.Millisecond, cap: 2 * time.Second}
	for _, opt := range opts {
		opt(&o)
	}
	for n := 1; ; n++ {
		err := b.Execute(ctx, fn)
		if err == nil || n >= attempts || errors.Is(err, ErrOpen) || errors.Is(err, ErrConcurrencyLimited) || b.classify(err, false) != observe.OutcomeFailure {
			return err
		}
		wait := o.backoff(n)
		if ra, ok := errors.AsType[retryAfterer](err); ok && ra.RetryAfter() > 0 {
			if ra.RetryAfter() > maxRetryAfter {
				return err
			}
			wait = ra.RetryAfter()
		}
		// The budget is asked before the wait: a refused retry is not worth waiting for.
		if ok, refusal := b.takeRetry(); refusal != nil {
			return refusal
		} else if !ok {
			return &retryBudgetError{breaker: b.name, last: err}
		}
		if err := sleep(ctx, wait, err); err != nil {
			return err
		}
	}
}

// backoff is the wait before the n-th retry (n from 1).
func (o *retryOptions) backoff(n int) time.Duration {
	if o.base <= 0 {
		return 0
	}
	limit := max(o.cap, o.base)
	d := o.base
	for i := 1; i < n && d < limit; i++ {
		if d > limit/2 {
			d = limit
			break
		}
		d *= 2
	}
	return rand.N(min(d, limit) + 1)
}

// sleep waits d, or until ctx ends, when it returns an error matching both ctx.Err() and
// last.
func sleep(ctx context.Context, d time.Duration, last error) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("breaker: retry abandoned during backoff: %w; last attempt: %w", ctx.Err(), last)
	case <-t.C:
		return nil
	}
}
