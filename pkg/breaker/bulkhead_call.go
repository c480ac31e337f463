package breaker

import (
	"context"
	"errors"
)

// The concurrency limit on the call path (bulkhead.go). A closed breaker with a limit and
// nothing else per call (no observer, retry budget, throttling, candidate or slow-call
// timing) admits as admitLimited: Execute takes a slot with one compare-and-swap, notes the
// peak, runs fn, and gives the slot back with one atomic addition, beside the closed
// path's one addition for the outcome; adaptive, it also reads the clock before fn and adds
// the call's latency to the limiter's counter after it (adaptive.go). Every other case
// takes its slot in admit: lock-free here for a call the circuit admitted without the
// lock, under the lock in admitSlow otherwise.

// executeLimited is Execute for admitLimited, untimed by the policy.
func (b *Breaker) executeLimited(ctx context.Context, p *period, fn func(context.Context) error) error {
	l := p.lim
	if !l.tryAcquire() {
		// Refused, or waiting for a slot: neither is worth writing out.
		return b.executeSlow(ctx, fn)
	}
	var start int64
	if p.adaptive {
		start = b.now()
	}
	completed := false
	defer func() {
		if !completed {
			b.abandon(ticket{p: p, recorded: true}, recover(), start)
		}
	}()
	err := fn(ctx)
	completed = true
	now := b.now()
	if p.adaptive && (err == nil || !errors.Is(err, context.Canceled)) {
		l.releaseSampled(now-start, now)
	} else if n := int64(l.word.Add(^uint64(0))&inFlightMask) + 1; now >= l.spanEnd.Load() || n > l.spanMax.Load() {
		// l.release(now), written out: the inliner will not take it.
		l.raisePeak(n, now)
	} else if l.waiters.Load() != 0 {
		l.wakeOne()
	}
	if err == nil {
		// recordSuccessFast, written out as in Execute.
		if bk := b.bucket.Load(); bk.gen == p.gen && now >= bk.start && now < bk.fastEnd.Load() && bk.addFast() {
			return nil
		}
	}
	b.finishClosed(p, err)
	return err
}

// slotFor takes a slot of p.lim for a call the circuit admitted in p without the lock,
// waiting for one up to p.maxWait, or until ctx ends. A call that waited and finds that the
// circuit moved on meanwhile is admitted again under the lock, holding its slot: it is
// judged by the circuit as it is when the call runs.
func (b *Breaker) slotFor(ctx context.Context, p *period) (ticket, error) {
	l := p.lim
	ok := l.tryAcquire()
	var cause error
	if !ok && p.maxWait > 0 {
		ok, cause = l.wait(ctx, p.maxWait)
		if ok && b.cur.Load() != p {
			return b.admitSlow(ctx, true)
		}
	}
	now := b.now()
	if !ok {
		l.refused(now)
		return ticket{}, b.limitErr(p.state, cause)
	}
	return ticket{p: p, recorded: true}, nil
}

// limitErr is the error of a call the limit refused in state s; cause is the context's
// error when the caller gave up waiting.
func (b *Breaker) limitErr(s State, cause error) error {
	if cause == nil {
		return b.errLimited[s]
	}
	return &limitError{breaker: b.name, state: s, cause: cause}
}

// releaseSlot gives back the slot of a call admitted in p, which started at start, and
// shows its latency to an adaptive limiter: that of every call that returned, but one that
// returned context.Canceled (its caller gave up, so its latency says nothing) or panicked.
func (b *Breaker) releaseSlot(p *period, err error, panicked bool, start int64) {
	now := b.callTime(p)
	if p.adaptive && !panicked && (err == nil || !errors.Is(err, context.Canceled)) {
		p.lim.releaseSampled(now-start, now)
	} else {
		p.lim.release(now)
	}
}

// limitedIn reports whether err is a refusal of b's concurrency limit, and the state of the
// circuit it was made in.
func limitedIn(err error) (State, bool) {
	if le, ok := err.(*limitError); ok {
		return le.state, true
	}
	return 0, false
}
