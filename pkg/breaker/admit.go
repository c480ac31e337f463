package breaker

import (
	"context"
	"errors"
	"math"
	"sync/atomic"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker/internal/core"
	"github.com/fusebox-dev/fusebox/pkg/breaker/observe"
)

// admitKind is how the call path may admit a call without taking the lock.
type admitKind uint8

const (
	admitSlow      admitKind = iota // take the lock (half-open, MetricsOnly open, call observers)
	admitClosed                     // admit, and record successes lock-free
	admitOpenUntil                  // refuse until halfOpenAt, then take the lock to go half-open
	admitTallied                    // closed with a retry budget or throttling: maybe throttle, then as admitClosed (throttle.go)
	admitShadowed                   // a candidate is judged in shadow: admit as base says, then the candidate (candidate_call.go)
	admitLimited                    // closed with a concurrency limit: take a slot, then as admitClosed (bulkhead_call.go)
)

// period is an immutable snapshot of what the call path needs about the current state
// period. A new one is published on every transition and on every Update; a call keeps the
// one it was admitted under, which is how a result from an earlier period is recognised.
type period struct {
	b     *Breaker
	gen   uint64
	state State
	admit admitKind
	// halfOpenAt is when, on the monotonic timeline, an open circuit goes half-open;
	// MaxInt64 if never (ForcedOpen), which makes a forced-open circuit refuse on the same
	// test as an open one.
	halfOpenAt int64
	// openFor is the open period's length while open, which RetryAfter never exceeds:
	// halfOpenAt less a coarse reading of now can, by the coarse clock's lag.
	openFor int64
	reject  error // for admitOpenUntil
	// slow is SlowCallDuration in nanoseconds, 0 when calls are not timed; exact says
	// they are timed on the exact clock rather than the coarse one (callTime).
	slow  int64
	exact bool
	// done funcs handed out by Allow, built once per period so that Allow allocates nothing.
	doneRecorded func(error)
	doneIgnored  func(error)
	tallied      // the retry budget and adaptive throttling (throttle.go)
	// lim is the breaker's limiter while the policy sets MaxInFlight, nil otherwise: every
	// call admitted in this period holds one of its slots (bulkhead.go). maxWait is
	// MaxWait, and adaptive says the limiter adapts, so calls are timed for it.
	lim      *limiter
	maxWait  time.Duration
	adaptive bool
	// cand is the candidate judged in shadow, nil without one; base is then how the
	// call path would admit without it (admit is admitShadowed).
	cand *candidate
	base admitKind
	// shadow is cand's breaker, and untimed that neither judgement times a call:
	// what executeShadowed's closed path needs, without following cand.
	shadow  *Breaker
	untimed bool
	// done is the done func Allow hands out for an untimed call both judgements record,
	// built for the candidate's period it holds (candidate_call.go).
	done atomic.Pointer[shadowDone]
}

func (p *period) finishRecorded(err error) { p.b.finish(ticket{p: p, recorded: true}, err, false, 0) }
func (p *period) finishIgnored(err error)  { p.b.finish(ticket{p: p}, err, false, 0) }

// ticket is an admitted call: the period it was admitted in, and whether its outcome is to
// be recorded (it is not for a call MetricsOnly runs although Enforce would have refused it).
// With a candidate, sp and srecorded are the same for the candidate's shadow breaker.
type ticket struct {
	p         *period
	recorded  bool
	srecorded bool
	sp        *period
}

// publish makes the call path see the current state, mode and policy. Caller holds mu.
func (b *Breaker) publish() {
	p := &period{b: b, gen: b.gen, state: b.state, halfOpenAt: math.MaxInt64}
	observed := len(b.callObs) > 0
	if b.state == Open && b.policy.Mode != ModeForcedOpen {
		p.halfOpenAt = b.openUntil()
		p.openFor = int64(b.openFor)
	}
	if d := b.policy.SlowCallDuration; d > 0 {
		p.slow = int64(d)
		p.exact = b.clock == nil && d < coarseEnough
	}
	b.publishTallied(p)
	if b.policy.MaxInFlight > 0 {
		if b.lim == nil {
			b.lim = newLimiter(&b.fleet)
		}
		b.lim.configure(&b.policy, b.now())
		p.lim, p.maxWait, p.adaptive = b.lim, b.policy.MaxWait, b.policy.Adaptive != nil
	}
	switch {
	case observed:
		p.admit = admitSlow
	case b.state == Closed && p.tally != nil:
		p.admit = admitTallied
	case b.state == Closed && p.lim != nil:
		p.admit = admitLimited
	case b.state == Closed:
		p.admit = admitClosed
	case b.state == Open && b.policy.Mode == ModeForcedOpen:
		p.admit, p.reject = admitOpenUntil, b.errForced
	case b.state == Open && b.policy.Mode == ModeEnforce:
		p.admit, p.reject = admitOpenUntil, b.errOpen
	}
	b.publishCandidate(p)
	p.doneRecorded = p.finishRecorded
	p.doneIgnored = p.finishIgnored
	b.cur.Store(p)
	b.armThrottle()
}

// coarseEnough is the shortest SlowCallDuration timed on the coarse clock: its reading may
// be a tick or so old at either end of a call, which is 2% of this. Shorter ones are timed
// on the exact monotonic clock, at the cost of two clock readings per call (about 30 ns
// each on the virtual machines we measure on; docs/benchmarks.md).
const coarseEnough = 50 * core.CoarseTick

// callTime reads the clock a call admitted in p is timed on (§5.13), on the monotonic
// timeline.
func (b *Breaker) callTime(p *period) int64 {
	if p.exact {
		// time.Since reads only the monotonic clock, not the wall clock too.
		return core.ExactMono()
	}
	return b.now()
}

// admit is the call path's one admission test, shared by Execute, Allow and Call: a closed
// circuit admits and an open one refuses on one atomic load (and, when open, a clock
// reading), without the lock; everything else takes the lock in admitSlow. A call over the
// concurrency limit waits for a slot until ctx ends (nil: it never does), at most MaxWait.
func (b *Breaker) admit(ctx context.Context) (ticket, error) {
	p := b.cur.Load()
	switch p.admit {
	case admitClosed:
		return ticket{p: p, recorded: true}, nil
	case admitLimited:
		return b.slotFor(ctx, p)
	case admitTallied:
		return b.admitTallied(ctx, p)
	case admitShadowed:
		return b.admitShadowed(ctx, p)
	case admitOpenUntil:
		if b.now() < p.halfOpenAt {
			return ticket{}, p.reject
		}
	}
	return b.admitSlow(ctx, false)
}

// Allow is the two-step form of Execute: it admits a call or refuses it, and the caller
// reports the outcome with done(err) once the call has finished. done must be called
// exactly once: a second call would count the outcome twice. When the call is refused, done
// is nil and err matches ErrOpen, or ErrConcurrencyLimited when the concurrency limit
// refused it; a call over the limit waits up to MaxWait for a slot, with no context to end
// the wait. Allow allocates nothing, unless the policy judges slow calls
// (SlowCallDuration) or adapts its concurrency limit (Adaptive), when done is a closure
// holding the call's start.
func (b *Breaker) Allow() (done func(err error), err error) {
	t, err := b.admit(context.Background())
	switch {
	case err != nil:
		return nil, err
	case t.sp != nil:
		return b.allowShadowed(t), nil
	case t.p.slow != 0 && t.recorded || t.p.adaptive:
		// A timed call needs its start: the one allocation of slow-call judging.
		start := b.startOf(t)
		return func(err error) { b.finish(t, err, false, start) }, nil
	case t.recorded:
		return t.p.doneRecorded, nil
	}
	return t.p.doneIgnored, nil
}

// Execute runs fn through the breaker: it returns an error matching ErrOpen without running
// fn when the circuit refuses the call, one matching ErrConcurrencyLimited when the
// concurrency limit does (after waiting up to MaxWait for a slot, or until ctx ends), and
// otherwise fn's own error, after recording the outcome. ctx is handed to fn. A panic in fn
// is recorded as a failure and continues up the stack; runtime.Goexit in fn (t.FailNow in a
// test) is recorded as neither.
//
// Its commonest paths are written out here rather than shared with Allow and Call: a closed
// call that succeeds costs one atomic add (recordSuccessFast), after the throttling decision
// when a retry budget or throttling is configured, and an open circuit's refusal one clock
// reading, each with no call besides fn's (and the decision's); every other case goes
// through executeSlow.
func (b *Breaker) Execute(ctx context.Context, fn func(context.Context) error) error {
	p := b.cur.Load()
	switch {
	case p.admit == admitClosed && p.slow == 0:
	case p.admit == admitOpenUntil && b.now() < p.halfOpenAt:
		return p.reject
	case p.admit == admitLimited && p.slow == 0:
		return b.executeLimited(ctx, p, fn)
	case p.admit == admitTallied && p.slow == 0 && p.lim == nil:
		// A retry budget or throttling: the same path, after the throttling decision.
		if p.throttleK != 0 && b.throttled(p, b.now()) {
			return b.errThrottled
		}
	case p.admit == admitShadowed:
		return b.executeShadowed(ctx, p, fn)
	default:
		return b.executeSlow(ctx, fn)
	}
	completed := false
	defer func() {
		if !completed {
			b.abandon(ticket{p: p, recorded: true}, recover(), 0)
		}
	}()
	err := fn(ctx)
	completed = true
	if err == nil {
		// recordSuccessFast, written out: the compiler will not inline it here. A stale
		// call (its period ended) falls through to finishClosed, which finds it stale.
		bk := b.bucket.Load()
		if now := b.now(); bk.gen == p.gen && now >= bk.start && now < bk.fastEnd.Load() && bk.addFast() {
			return nil
		}
	}
	b.finishClosed(p, err)
	return err
}

// finishClosed records the outcome of a call admitted closed, not timed, which the
// lock-free path did not record.
func (b *Breaker) finishClosed(p *period, err error) {
	b.finishSlow(ticket{p: p, recorded: true}, b.classify(err, false), false, err, false)
}

// executeSlow is Execute for every call but a closed, untimed one and an open refusal.
func (b *Breaker) executeSlow(ctx context.Context, fn func(context.Context) error) error {
	t, err := b.admit(ctx)
	if err != nil {
		return err
	}
	start := b.startOf(t)
	completed := false
	defer func() {
		if !completed {
			// recover works only when called by the deferred function itself.
			b.abandon(t, recover(), start)
		}
	}()
	err = fn(ctx)
	completed = true
	b.finish(t, err, false, start)
	return err
}

// abandon records a protected function that did not return: a panic is a failure and is
// re-raised; runtime.Goexit (recover finds nothing) is neither success nor failure.
func (b *Breaker) abandon(t ticket, r any, start int64) {
	if r == nil {
		if t.p.lim != nil {
			t.p.lim.release(b.now())
		}
		if t.sp != nil {
			t.sp.b.finishSlow(ticket{p: t.sp, recorded: t.srecorded}, observe.OutcomeIgnored, false, errGoexit, false)
		}
		b.finishSlow(t, observe.OutcomeIgnored, false, errGoexit, false)
		return
	}
	b.finish(t, &panicError{value: r}, true, start)
	panic(r)
}

var errGoexit = errors.New("breaker: protected function called runtime.Goexit")

// admitSlow admits under the lock. held says the caller holds a slot of b.lim already,
// which it waited for: the call takes it if the circuit still admits it and still limits,
// and gives it back otherwise. A call the circuit admits that finds no slot waits for one
// (up to MaxWait, or until ctx ends) without the lock, then asks the circuit again.
func (b *Breaker) admitSlow(ctx context.Context, held bool) (ticket, error) {
	for waited := held; ; waited = true {
		now := b.now()
		var pend pending
		b.mu.Lock()
		b.advance(now, &pend)
		p := b.cur.Load()
		t := ticket{p: p}
		reason := rejectNone
		probe := false
		switch {
		case b.state == Closed && p.tally != nil && b.throttled(p, now):
			reason = rejectThrottled
		case b.state == Closed:
			t.recorded = true
		case b.policy.Mode == ModeForcedOpen:
			reason = rejectForcedOpen
		case b.state == HalfOpen && b.probesInFlight < b.policy.HalfOpenPermittedCalls:
			probe, t.recorded = true, true
		case b.policy.Mode == ModeMetricsOnly:
			// Enforce would refuse this call: it runs, and its outcome is not recorded.
		case b.state == HalfOpen:
			reason = rejectHalfOpenSaturated
		default:
			reason = rejectOpen
		}
		// The concurrency limit, for a call the circuit admits: a probe refused by it
		// takes no probe slot, and one waiting for it holds none.
		if reason == rejectNone && p.lim != nil {
			switch {
			case held:
				held = false // the call's now
			case !p.lim.tryAcquire():
				reason = rejectLimited
			}
		}
		if probe && reason == rejectNone {
			b.probesInFlight++
			b.awaitingProbe, b.lastProbeAt = true, now
		}
		b.mu.Unlock()
		b.deliver(&pend)
		if held {
			// Waited for, and not needed: the circuit refused the call, or no longer limits.
			b.lim.release(now)
		}
		var cause error
		if reason == rejectLimited && !waited && p.maxWait > 0 {
			var ok bool
			if ok, cause = p.lim.wait(ctx, p.maxWait); ok {
				held = true
				continue
			}
			now = b.now()
		}
		if reason != rejectNone {
			err := b.rejectErr(reason)
			if reason == rejectLimited {
				p.lim.refused(now)
				err = b.limitErr(p.state, cause)
			}
			for _, co := range b.callObs {
				co.OnCallEnd(observe.CallEvent{Breaker: b.name, Outcome: observe.OutcomeRejected, Initial: p.state, Final: p.state, Err: err})
			}
			return ticket{}, err
		}
		for _, co := range b.callObs {
			co.OnCallStart(b.name, p.state)
		}
		return t, nil
	}
}

func (b *Breaker) rejectErr(r rejectReason) error {
	switch r {
	case rejectHalfOpenSaturated:
		return b.errProbes
	case rejectForcedOpen:
		return b.errForced
	case rejectThrottled:
		return b.errThrottled
	}
	return b.errOpen
}

// classify turns what the protected function returned into an outcome (§5.6).
func (b *Breaker) classify(err error, panicked bool) observe.Outcome {
	switch {
	case panicked:
		return observe.OutcomeFailure
	case err == nil:
		return observe.OutcomeSuccess
	case b.isFailure(err):
		return observe.OutcomeFailure
	case errors.Is(err, context.Canceled):
		return observe.OutcomeIgnored
	}
	return observe.OutcomeSuccess
}

// finish records the outcome of an admitted call and reports whether it was a failure by the
// classifier (whether or not it was recorded: Call's fallback depends on the call, not on
// the circuit). start is when a timed call started (callTime), for slow-call judging.
func (b *Breaker) finish(t ticket, err error, panicked bool, start int64) bool {
	if t.p.lim != nil {
		b.releaseSlot(t.p, err, panicked, start)
	}
	if t.sp != nil {
		b.finishShadow(t, err, panicked, start)
	}
	slow := t.p.slow != 0 && b.callTime(t.p)-start >= t.p.slow
	kind := t.p.admit
	if kind == admitShadowed {
		kind = t.p.base
	}
	if err == nil && !panicked && !slow && t.recorded && (kind == admitClosed || kind == admitTallied || kind == admitLimited) && b.recordSuccessFast(t.p) {
		return false
	}
	o := b.classify(err, panicked)
	b.finishSlow(t, o, slow, err, panicked)
	return o == observe.OutcomeFailure
}

// recordSuccessFast counts a success admitted while closed without taking the lock, and
// reports whether it did (or found the result stale, which needs nothing done). It is only
// used where no CallObserver is set.
func (b *Breaker) recordSuccessFast(p *period) bool {
	bk := b.bucket.Load()
	if bk.gen != p.gen {
		// Buckets are replaced on every transition: the call belongs to an earlier period.
		return true
	}
	// While guarded, fastEnd is MinInt64: a success may open the circuit on slow calls,
	// and is judged under mu.
	now := b.now()
	return now >= bk.start && now < bk.fastEnd.Load() && bk.addFast()
}

func (b *Breaker) finishSlow(t ticket, o observe.Outcome, slow bool, err error, panicked bool) {
	final := t.p.state
	recordedAs := observe.OutcomeIgnored
	var pend pending
	if t.recorded && (o != observe.OutcomeIgnored || t.p.state == HalfOpen) {
		now := b.now()
		b.mu.Lock()
		if t.p.state == HalfOpen && b.state == HalfOpen {
			// A probe that reports after its half-open period timed out is stale, even
			// when nothing noticed the time-out before it reported.
			b.advance(now, &pend)
		}
		if t.p.gen == b.gen {
			recordedAs = b.record(now, o, slow, err, &pend)
		}
		final = b.state
		b.mu.Unlock()
		b.deliver(&pend)
	} else if len(b.callObs) > 0 {
		final = b.cur.Load().state
	}
	for _, co := range b.callObs {
		co.OnCallEnd(observe.CallEvent{Breaker: b.name, Outcome: recordedAs, Initial: t.p.state, Final: final, Err: err, Panic: panicValue(err, panicked), Slow: slow && o != observe.OutcomeIgnored})
	}
}

// panicValue is what a protected function that panicked panicked with (err is then the
// panicError abandon recorded), and nil for one that returned.
func panicValue(err error, panicked bool) any {
	if pe, ok := err.(*panicError); ok && panicked {
		return pe.value
	}
	return nil
}
