package breaker

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// Counts are a breaker's tallies. Closed or open, Calls and Failures are the window's totals
// (while open, the tally that opened it, frozen) and Successes is 0. Half-open, Calls is the
// probes completed in this half-open period, Successes the consecutive probe successes, and
// Failures 0, since a probe failure re-opens the circuit.
type Counts struct {
	Calls     int64
	Failures  int64
	Successes int64
}

// Verdict is what processes share about a breaker: its state and when that was reached,
// never its counters.
type Verdict struct {
	State             State
	Since             time.Time // when State was reached; for Open, the start of the open period
	HalfOpenSuccesses int       // consecutive probe successes so far, when HalfOpen
}

// admitKind is how the call path may admit a call without taking the lock.
type admitKind uint8

const (
	admitSlow       admitKind = iota // take the lock (half-open, MetricsOnly open, call observers)
	admitClosed                      // admit, and record successes lock-free
	admitOpenUntil                   // refuse until halfOpenAt, then take the lock to go half-open
	admitForcedOpen                  // refuse
)

// period is an immutable snapshot of what the call path needs about the current state
// period. A new one is published on every transition and on every Update; a call keeps the
// one it was admitted under, which is how a result from an earlier period is recognised.
type period struct {
	b          *Breaker
	gen        uint64
	state      State
	admit      admitKind
	halfOpenAt int64 // unix ns at which an open circuit goes half-open; MaxInt64 if never
	reject     error // for admitOpenUntil and admitForcedOpen
	// done funcs handed out by Allow, built once per period so that Allow allocates nothing.
	doneRecorded func(error)
	doneIgnored  func(error)
}

func (p *period) finishRecorded(err error) { p.b.finish(ticket{p, true}, err, false) }
func (p *period) finishIgnored(err error)  { p.b.finish(ticket{p, false}, err, false) }

// ticket is an admitted call: the period it was admitted in, and whether its outcome is to
// be recorded (it is not for a call MetricsOnly runs although Enforce would have refused it).
type ticket struct {
	p        *period
	recorded bool
}

const sealed = math.MinInt64 // sign bit of a stripe's count: the bucket is retired

// liveBucket is the window's current bucket, which successes are added to without the lock.
// When it is retired (rollover, transition, re-indexing) the lock holder seals it by setting
// the sign bit of every stripe; an adder that sees the bit in the value its Add returned
// knows its call was not counted there and takes the lock instead. Every outcome is
// therefore counted exactly once, or found stale, even when it races the retirement.
type liveBucket struct {
	gen        uint64 // the state period the bucket belongs to
	idx        int64  // floor(start / window)
	start, end int64  // unix ns, [start, end)
	_          [64]byte
	// The count of calls is striped over cache lines, so that goroutines on different cores
	// do not take turns owning one line: under RunParallel on two cores one shared counter
	// cost about twice as much per add as eight stripes.
	stripes [stripeCount]stripe
}

const (
	stripeBits  = 3
	stripeCount = 1 << stripeBits
)

type stripe struct {
	calls atomic.Int64
	_     [56]byte
}

// addFast counts one call on the caller's stripe and reports whether the bucket was still
// live.
func (bk *liveBucket) addFast() bool {
	return bk.stripes[stripeHint()].calls.Add(1)&sealed == 0
}

// stripeHint tells goroutines apart cheaply: each runs on its own stack, so the address of
// a local variable differs between them and rarely changes for one of them. A collision or
// a moved stack costs only some contention, never a wrong count.
func stripeHint() uintptr {
	var local byte
	// Fibonacci hashing of the address above its low bits, so that stacks that lie a
	// power of two apart (they often do) still land on different stripes.
	return uintptr((uint64(uintptr(unsafe.Pointer(&local))>>10) * 0x9E3779B97F4A7C15) >> (64 - stripeBits))
}

func (bk *liveBucket) calls() int64 {
	var n int64
	for i := range bk.stripes {
		n += bk.stripes[i].calls.Load() &^ sealed
	}
	return n
}

// Breaker is a circuit breaker. It is safe for concurrent use.
type Breaker struct {
	// Read on every call; written only under mu.
	cur    atomic.Pointer[period]
	bucket atomic.Pointer[liveBucket]

	// Fixed at New.
	name      string
	clock     Clock // nil: the coarse clock
	isFailure func(error) bool
	observers []Observer
	callObs   []CallObserver
	errOpen   error
	errProbes error
	errForced error

	_ [64]byte

	mu sync.Mutex
	// guarded by mu:
	policy         Policy
	state          State
	gen            uint64
	since          int64 // unix ns at which state was reached; for Open, the open period's start
	changed        bool  // some transition has happened (Adopt's staleness test needs it)
	openedAt       int64 // unix ns at which the latest open period started
	liveFailures   int64 // failures in the live bucket
	prevCalls      int64 // the bucket before the live one
	prevFailures   int64
	openTally      Counts // the tally that opened the circuit, while open
	probesInFlight int
	probeCalls     int64
	probeSuccesses int64
}

// New returns a breaker named name, closed (or open, if p.Mode is ModeForcedOpen). A policy
// that fails [Policy.Validate] is refused.
func New(name string, p Policy, opts ...Option) (*Breaker, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	b := &Breaker{
		name:      name,
		clock:     o.clock,
		isFailure: o.isFailure,
		observers: o.observers,
		errOpen:   &OpenError{Breaker: name, Reason: RejectOpen},
		errProbes: &OpenError{Breaker: name, Reason: RejectHalfOpenSaturated},
		errForced: &OpenError{Breaker: name, Reason: RejectForcedOpen},
		policy:    p.withDefaults(),
	}
	if b.isFailure == nil {
		b.isFailure = DefaultIsFailure
	}
	for _, obs := range o.observers {
		if co, ok := obs.(CallObserver); ok {
			b.callObs = append(b.callObs, co)
		}
	}
	now := b.now()
	b.since = b.exactNow()
	if b.policy.Mode == ModeForcedOpen {
		b.state = Open
	}
	b.resetWindow(now)
	b.publish()
	return b, nil
}

// Name returns the breaker's name.
func (b *Breaker) Name() string { return b.name }

// Policy returns the policy in force, with an empty Mode spelled ModeEnforce.
func (b *Breaker) Policy() Policy {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.policy
}

func (b *Breaker) now() int64 {
	if b.clock == nil {
		return coarseNow()
	}
	return b.clockNow()
}

func (b *Breaker) clockNow() int64 { return b.clock.Now().UnixNano() }

// exactNow is for timestamps others read (Transition.At, Verdict.Since), taken only on
// transitions, where the cost of the wall clock does not matter.
func (b *Breaker) exactNow() int64 {
	if b.clock != nil {
		return b.clock.Now().UnixNano()
	}
	return time.Now().UnixNano()
}

// Allow is the two-step form of Execute: it admits a call or refuses it, and the caller
// reports the outcome with done(err) once the call has finished. done must be called
// exactly once: a second call would count the outcome twice. When the call is refused, done
// is nil and err matches ErrOpen. Allow allocates nothing.
func (b *Breaker) Allow() (done func(err error), err error) {
	p := b.cur.Load()
	switch p.admit {
	case admitClosed:
		return p.doneRecorded, nil
	case admitOpenUntil:
		if b.now() < p.halfOpenAt {
			return nil, p.reject
		}
	case admitForcedOpen:
		return nil, p.reject
	}
	t, err := b.admitSlow()
	if err != nil {
		return nil, err
	}
	if t.recorded {
		return t.p.doneRecorded, nil
	}
	return t.p.doneIgnored, nil
}

// Execute runs fn through the breaker: it returns an error matching ErrOpen without running
// fn when the circuit refuses the call, and otherwise fn's own error, after recording the
// outcome. ctx is only handed to fn. A panic in fn is recorded as a failure and continues up
// the stack; runtime.Goexit in fn (t.FailNow in a test) is recorded as neither.
func (b *Breaker) Execute(ctx context.Context, fn func(context.Context) error) error {
	// admit, spelled out: the open short-circuit stays in this frame.
	p := b.cur.Load()
	t := ticket{p, true}
	if p.admit != admitClosed {
		if p.admit == admitForcedOpen || p.admit == admitOpenUntil && b.now() < p.halfOpenAt {
			return p.reject
		}
		var err error
		if t, err = b.admitSlow(); err != nil {
			return err
		}
	}
	completed := false
	defer func() {
		if !completed {
			// recover works only when called by the deferred function itself.
			b.abandon(t, recover())
		}
	}()
	err := fn(ctx)
	completed = true
	b.finish(t, err, false)
	return err
}

// abandon records a protected function that did not return: a panic is a failure and is
// re-raised; runtime.Goexit (recover finds nothing) is neither success nor failure.
func (b *Breaker) abandon(t ticket, r any) {
	if r == nil {
		b.finishSlow(t, OutcomeIgnored, errGoexit, false)
		return
	}
	b.finish(t, &PanicError{Value: r}, true)
	panic(r)
}

var errGoexit = errors.New("breaker: protected function called runtime.Goexit")

// PanicError is the failure recorded, and reported to observers, for a protected function
// that panicked. The panic itself is re-raised, so callers never receive it as an error.
type PanicError struct{ Value any }

func (e *PanicError) Error() string { return "breaker: protected function panicked" }

func (b *Breaker) admit() (ticket, error) {
	p := b.cur.Load()
	switch p.admit {
	case admitClosed:
		return ticket{p, true}, nil
	case admitOpenUntil:
		if b.now() < p.halfOpenAt {
			return ticket{}, p.reject
		}
	case admitForcedOpen:
		return ticket{}, p.reject
	}
	return b.admitSlow()
}

func (b *Breaker) admitSlow() (ticket, error) {
	now := b.now()
	var pend pending
	b.mu.Lock()
	b.advance(now, &pend)
	p := b.cur.Load()
	t := ticket{p: p}
	reason := RejectNone
	switch {
	case b.state == Closed:
		t.recorded = true
	case b.policy.Mode == ModeForcedOpen:
		reason = RejectForcedOpen
	case b.state == HalfOpen && b.probesInFlight < b.policy.HalfOpenPermittedCalls:
		b.probesInFlight++
		t.recorded = true
	case b.policy.Mode == ModeMetricsOnly:
		// Enforce would refuse this call: it runs, and its outcome is not recorded.
	case b.state == HalfOpen:
		reason = RejectHalfOpenSaturated
	default:
		reason = RejectOpen
	}
	b.mu.Unlock()
	b.deliver(&pend)
	if reason != RejectNone {
		err := b.rejectErr(reason)
		for _, co := range b.callObs {
			co.OnCallEnd(CallEvent{Breaker: b.name, Outcome: OutcomeRejected, Reason: reason, Initial: p.state, Final: p.state})
		}
		return ticket{}, err
	}
	for _, co := range b.callObs {
		co.OnCallStart(b.name, p.state)
	}
	return t, nil
}

func (b *Breaker) rejectErr(r RejectReason) error {
	switch r {
	case RejectHalfOpenSaturated:
		return b.errProbes
	case RejectForcedOpen:
		return b.errForced
	}
	return b.errOpen
}

// classify turns what the protected function returned into an outcome (§5.6).
func (b *Breaker) classify(err error, panicked bool) Outcome {
	switch {
	case panicked:
		return OutcomeFailure
	case err == nil:
		return OutcomeSuccess
	case b.isFailure(err):
		return OutcomeFailure
	case errors.Is(err, context.Canceled):
		return OutcomeIgnored
	}
	return OutcomeSuccess
}

// finish records the outcome of an admitted call and reports whether it was a failure by the
// classifier (whether or not it was recorded: Call's fallback depends on the call, not on
// the circuit).
func (b *Breaker) finish(t ticket, err error, panicked bool) bool {
	if err == nil && !panicked && t.recorded && t.p.admit == admitClosed && b.recordSuccessFast(t.p) {
		return false
	}
	return b.finishClassified(t, err, panicked)
}

func (b *Breaker) finishClassified(t ticket, err error, panicked bool) bool {
	o := b.classify(err, panicked)
	b.finishSlow(t, o, err, panicked)
	return o == OutcomeFailure
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
	now := b.now()
	return now >= bk.start && now < bk.end && bk.addFast()
}

func (b *Breaker) finishSlow(t ticket, o Outcome, err error, panicked bool) {
	final := t.p.state
	recordedAs := OutcomeIgnored
	var pend pending
	if t.recorded && (o != OutcomeIgnored || t.p.state == HalfOpen) {
		now := b.now()
		b.mu.Lock()
		if t.p.gen == b.gen {
			recordedAs = b.record(now, o, err, &pend)
		}
		final = b.state
		b.mu.Unlock()
		b.deliver(&pend)
	} else if len(b.callObs) > 0 {
		final = b.cur.Load().state
	}
	for _, co := range b.callObs {
		co.OnCallEnd(CallEvent{Breaker: b.name, Outcome: recordedAs, Initial: t.p.state, Final: final, Err: err, Panicked: panicked})
	}
}

// record applies the outcome of a call admitted in the current period. Caller holds mu.
func (b *Breaker) record(now int64, o Outcome, err error, pend *pending) Outcome {
	switch b.state {
	case Closed:
		if o == OutcomeIgnored {
			return o
		}
		b.roll(now)
		b.bucket.Load().stripes[0].calls.Add(1) // under mu the bucket is live
		if o == OutcomeSuccess {
			return o
		}
		b.liveFailures++
		if b.policy.Mode == ModeForcedClosed {
			return o
		}
		c := b.windowCounts()
		if c.Calls >= int64(b.policy.MinimumThroughput) && float64(c.Failures)/float64(c.Calls) >= b.policy.FailureRatio {
			b.transition(Open, CauseCalls, c, err, b.exactNow(), now, pend)
		}
	case HalfOpen:
		// Every recorded call admitted while half-open is a probe.
		if b.probesInFlight > 0 {
			b.probesInFlight--
		}
		switch o {
		case OutcomeSuccess:
			b.probeCalls++
			b.probeSuccesses++
			if b.probeSuccesses >= int64(b.policy.SuccessThreshold) {
				b.transition(Closed, CauseCalls, b.probeCounts(), nil, b.exactNow(), now, pend)
			}
		case OutcomeFailure:
			c := Counts{Calls: b.probeCalls + 1, Failures: 1, Successes: b.probeSuccesses}
			b.transition(Open, CauseCalls, c, err, b.exactNow(), now, pend)
		}
	}
	return o
}

func (b *Breaker) probeCounts() Counts {
	return Counts{Calls: b.probeCalls, Successes: b.probeSuccesses}
}

// windowCounts totals the live and previous buckets. Caller holds mu and has rolled.
func (b *Breaker) windowCounts() Counts {
	return Counts{
		Calls:    b.bucket.Load().calls() + b.prevCalls,
		Failures: b.liveFailures + b.prevFailures,
	}
}

// counts is what Counts reports. Caller holds mu.
func (b *Breaker) counts(now int64) Counts {
	switch b.state {
	case Open:
		return b.openTally
	case HalfOpen:
		return b.probeCounts()
	}
	b.roll(now)
	return b.windowCounts()
}

// roll moves the window to the bucket that holds now, forgetting what is two buckets old.
// A clock that went backwards leaves the window where it is. Caller holds mu.
func (b *Breaker) roll(now int64) {
	live := b.bucket.Load()
	idx := floorDiv(now, int64(b.policy.Window))
	if idx <= live.idx {
		return
	}
	calls := b.seal(live)
	if idx == live.idx+1 {
		b.prevCalls, b.prevFailures = calls, b.liveFailures
	} else {
		b.prevCalls, b.prevFailures = 0, 0
	}
	b.liveFailures = 0
	b.installBucket(idx, 0)
}

// reindex re-cuts the window after its width changed: the live bucket's tallies become
// those of the new-width bucket holding now and the previous bucket stays the previous one,
// so nothing is lost and both age out under the new width. Caller holds mu and has rolled
// under the old width.
func (b *Breaker) reindex(now int64) {
	calls := b.seal(b.bucket.Load())
	b.installBucket(floorDiv(now, int64(b.policy.Window)), calls)
}

// resetWindow empties the window. Caller holds mu (or owns b).
func (b *Breaker) resetWindow(now int64) {
	if live := b.bucket.Load(); live != nil {
		b.seal(live)
	}
	b.liveFailures, b.prevCalls, b.prevFailures = 0, 0, 0
	b.installBucket(floorDiv(now, int64(b.policy.Window)), 0)
}

func (b *Breaker) seal(bk *liveBucket) int64 {
	var n int64
	for i := range bk.stripes {
		n += bk.stripes[i].calls.Or(sealed) &^ sealed
	}
	return n
}

func (b *Breaker) installBucket(idx, calls int64) {
	w := int64(b.policy.Window)
	bk := &liveBucket{gen: b.gen, idx: idx}
	bk.start = mulSat(idx, w)
	bk.end = addSat(bk.start, w)
	bk.stripes[0].calls.Store(calls)
	b.bucket.Store(bk)
}

// transition moves to state to and starts a new state period. Caller holds mu.
func (b *Breaker) transition(to State, cause TransitionCause, c Counts, err error, at, now int64, pend *pending) {
	from := b.state
	b.gen++
	b.state = to
	b.since = at
	b.changed = true
	switch to {
	case Open:
		b.openTally = Counts{Calls: c.Calls, Failures: c.Failures}
		b.openedAt = at
	case Closed:
		b.openTally = Counts{}
	}
	b.probesInFlight, b.probeCalls, b.probeSuccesses = 0, 0, 0
	// Every transition replaces the live bucket, even on opening (whose tally is kept in
	// openTally): that is what tells the lock-free path its result is stale.
	b.resetWindow(now)
	b.publish()
	pend.add(Transition{Breaker: b.name, From: from, To: to, At: time.Unix(0, at), Counts: c, Err: err, Cause: cause, Period: b.gen})
}

// openNow opens the circuit for Trip, a forced mode or Adopt, keeping the tally that
// opened it. Caller holds mu.
func (b *Breaker) openNow(cause TransitionCause, at, now int64, pend *pending) {
	c := b.counts(now)
	b.transition(Open, cause, c, nil, at, now, pend)
}

// advance applies the lazy open → half-open move. Caller holds mu.
func (b *Breaker) advance(now int64, pend *pending) {
	if b.state == Open && b.policy.Mode != ModeForcedOpen && now >= addSat(b.since, int64(b.policy.OpenTimeout)) {
		b.transition(HalfOpen, CauseTimeout, b.openTally, nil, b.exactNow(), now, pend)
	}
}

// publish makes the call path see the current state, mode and policy. Caller holds mu.
func (b *Breaker) publish() {
	p := &period{b: b, gen: b.gen, state: b.state, halfOpenAt: math.MaxInt64}
	observed := len(b.callObs) > 0
	if b.state == Open && b.policy.Mode != ModeForcedOpen {
		p.halfOpenAt = addSat(b.since, int64(b.policy.OpenTimeout))
	}
	switch {
	case observed:
		p.admit = admitSlow
	case b.state == Closed:
		p.admit = admitClosed
	case b.state == Open && b.policy.Mode == ModeForcedOpen:
		p.admit, p.reject = admitForcedOpen, b.errForced
	case b.state == Open && b.policy.Mode == ModeEnforce:
		p.admit, p.reject = admitOpenUntil, b.errOpen
	}
	p.doneRecorded = p.finishRecorded
	p.doneIgnored = p.finishIgnored
	b.cur.Store(p)
}

// pending collects the transitions made under the lock, to be delivered after it.
type pending struct {
	n int
	t [2]Transition
}

func (p *pending) add(t Transition) {
	if p.n < len(p.t) {
		p.t[p.n] = t
		p.n++
	}
}

func (b *Breaker) deliver(p *pending) {
	for i := 0; i < p.n; i++ {
		for _, obs := range b.observers {
			obs.OnTransition(p.t[i])
		}
	}
}

// State returns the circuit's state, first moving an open circuit whose timeout has passed
// to half-open. Under ModeForcedOpen it is Open, under ModeForcedClosed Closed.
func (b *Breaker) State() State {
	p := b.cur.Load()
	if p.state != Open || b.now() < p.halfOpenAt {
		return p.state
	}
	var pend pending
	b.mu.Lock()
	b.advance(b.now(), &pend)
	s := b.state
	b.mu.Unlock()
	b.deliver(&pend)
	return s
}

// Counts returns the breaker's tallies (see [Counts]).
func (b *Breaker) Counts() Counts {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.counts(now)
}

// Trip opens the circuit now, restarting the open period if it is already open, with the
// normal timeout. Under ModeForcedOpen or ModeForcedClosed it does nothing: the mode wins.
func (b *Breaker) Trip() {
	var pend pending
	b.mu.Lock()
	if m := b.policy.Mode; m != ModeForcedOpen && m != ModeForcedClosed {
		b.openNow(CauseTrip, b.exactNow(), b.now(), &pend)
	}
	b.mu.Unlock()
	b.deliver(&pend)
}

// Update applies a new policy without losing state: an open circuit stays open, timed from
// when it opened; the window keeps its tallies, which age out under the new width; probes in
// flight stay in flight. Entering ModeForcedOpen opens the circuit (keeping an open period
// already running) and entering ModeForcedClosed closes it; leaving either changes nothing by
// itself. An invalid policy is refused with an error naming the field, and the old one stays.
func (b *Breaker) Update(p Policy) error {
	if err := p.Validate(); err != nil {
		return err
	}
	p = p.withDefaults()
	var pend pending
	b.mu.Lock()
	if p == b.policy {
		b.mu.Unlock()
		return nil
	}
	now := b.now()
	if b.state == Closed {
		b.roll(now)
	}
	widthChanged := p.Window != b.policy.Window
	b.policy = p
	if widthChanged {
		b.reindex(now)
	}
	switch {
	case p.Mode == ModeForcedOpen && b.state != Open:
		b.openNow(CauseMode, b.exactNow(), now, &pend)
	case p.Mode == ModeForcedClosed && b.state != Closed:
		b.transition(Closed, CauseMode, b.counts(now), nil, b.exactNow(), now, &pend)
	}
	b.publish()
	b.mu.Unlock()
	b.deliver(&pend)
	return nil
}

// Verdict returns the breaker's state and when it was reached, first moving an open circuit
// whose timeout has passed to half-open, as State does.
func (b *Breaker) Verdict() Verdict {
	var pend pending
	b.mu.Lock()
	b.advance(b.now(), &pend)
	v := Verdict{State: b.state, Since: time.Unix(0, b.since)}
	if b.state == HalfOpen {
		v.HalfOpenSuccesses = int(b.probeSuccesses)
	}
	b.mu.Unlock()
	b.deliver(&pend)
	return v
}

// Adopt applies a verdict reached elsewhere (another process, the fleet), keeping the
// window's tallies, and reports whether the state changed:
//
//   - Open: the circuit is open, its open period starting at v.Since, from any state; if it
//     is already open, v.Since replaces the local start (and the state does not change). It
//     goes half-open by itself OpenTimeout after v.Since, with its own local probe cap.
//   - HalfOpen: from Open only, moves to half-open with v.HalfOpenSuccesses carried over.
//   - Closed: from Open or HalfOpen, closes, clearing the window, unless v.Since is
//     earlier than the start of the local open period (a verdict about an older outage).
//     A circuit that went half-open by its own timeout after the verdict was reached
//     still closes: the verdict concluded this open period.
//
// An Open or HalfOpen verdict from before the local state was reached (v.Since earlier
// than the local transition) is stale and ignored, so a late or repeated delivery cannot
// undo a newer local decision: a circuit that went half-open or closed by itself is not
// sent back to an open period that already ended. Under ModeForcedOpen or ModeForcedClosed the mode wins and
// Adopt does nothing. An identical verdict is a no-op. A transition Adopt causes is
// delivered to observers with Cause CauseAdopted, so that stores do not echo it back. A zero
// v.Since means now.
func (b *Breaker) Adopt(v Verdict) bool {
	var pend pending
	b.mu.Lock()
	changed := b.adopt(v, &pend)
	b.mu.Unlock()
	b.deliver(&pend)
	return changed
}

func (b *Breaker) adopt(v Verdict, pend *pending) bool {
	if m := b.policy.Mode; m == ModeForcedOpen || m == ModeForcedClosed {
		return false
	}
	now := b.now()
	since := b.exactNow()
	if !v.Since.IsZero() {
		since = v.Since.UnixNano()
	}
	stale := b.changed && since < b.since
	switch v.State {
	case Open:
		if b.state == Open {
			if since != b.since {
				b.since, b.openedAt = since, since
				b.publish()
			}
			return false
		}
		if stale {
			return false
		}
		b.openNow(CauseAdopted, since, now, pend)
	case HalfOpen:
		if b.state != Open || stale {
			return false
		}
		b.transition(HalfOpen, CauseAdopted, b.openTally, nil, since, now, pend)
		b.probeSuccesses = int64(max(v.HalfOpenSuccesses, 0))
		b.probeCalls = b.probeSuccesses
	case Closed:
		// A closed verdict ends every open period that started before it. It is
		// judged against when this circuit opened, not when it went half-open:
		// a pod whose own timeout moved it to half-open after the fleet closed
		// would otherwise wait for traffic to learn what the fleet knows.
		if b.state == Closed || b.changed && since < b.openedAt {
			return false
		}
		b.transition(Closed, CauseAdopted, b.counts(now), nil, since, now, pend)
	default:
		return false
	}
	return true
}

// RetryAfter reports how long until an open circuit admits probes. ok is false when the
// circuit is not open, or is held open by ModeForcedOpen, whose end nobody knows.
func (b *Breaker) RetryAfter() (d time.Duration, ok bool) {
	p := b.cur.Load()
	if p.state != Open || p.halfOpenAt == math.MaxInt64 {
		return 0, false
	}
	return time.Duration(max(p.halfOpenAt-b.now(), 0)), true
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func addSat(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	if b < 0 && a < math.MinInt64-b {
		return math.MinInt64
	}
	return a + b
}

func mulSat(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	r := a * b
	if r/b != a {
		if (a < 0) != (b < 0) {
			return math.MinInt64
		}
		return math.MaxInt64
	}
	return r
}
