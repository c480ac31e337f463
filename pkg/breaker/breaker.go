package breaker

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/internal/circuit"
	"github.com/fusebox-dev/fusebox/pkg/breaker/internal/core"
	"github.com/fusebox-dev/fusebox/pkg/breaker/observe"
)

// The breaker is spread over files by job: this one holds the type and its public methods
// outside the call path; admit.go the call path (admission and recording outcomes);
// window.go the rolling window; state.go the state machine; verdict.go what is shared with
// other processes (Verdict, Adopt).

// Counts are a breaker's tallies. Closed or open, Calls, Failures and Slow are the window's
// totals (while open, the tally that opened it, frozen) and Successes is 0. Half-open, Calls
// is the probes completed in this half-open period, Successes the consecutive probe
// successes, and Failures and Slow 0, since a failed or slow probe re-opens the circuit.
// Slow counts calls that took at least Policy.SlowCallDuration, whatever their outcome, and
// stays 0 without it. It is the type package observe speaks of too.
type Counts = circuit.Counts

// Breaker is a circuit breaker. It is safe for concurrent use.
type Breaker struct {
	// Read on every call; written only under mu.
	cur    atomic.Pointer[period]
	bucket atomic.Pointer[liveBucket]
	// What the operator last published about the fleet (SetFleet); nil until then.
	fleet atomic.Pointer[Fleet]
	// throttleArmed says throttling could refuse a call (armThrottle); while it is
	// false the throttling decision is one load.
	throttleArmed atomic.Bool

	// Fixed at New.
	name      string
	clock     *core.Reader // nil: the coarse clock
	isFailure func(error) bool
	observers []observe.Observer
	callObs   []observe.CallObserver
	errOpen   error
	errProbes error
	errForced error
	// For the retry budget and adaptive throttling (retry.go, throttle.go).
	errThrottled error
	// The refusals of the concurrency limit, by the state of the circuit (bulkhead.go).
	errLimited [3]*limitError
	rnd        func() float64 // nil: math/rand/v2; tests set a deterministic source

	_ [64]byte

	mu sync.Mutex
	// guarded by mu:
	policy Policy
	state  State
	gen    uint64
	// When state was reached (for Open, the open period's start): since on the wall clock,
	// for what leaves the process and for comparing with verdicts from elsewhere, and
	// sinceMono on the monotonic timeline, for timing the open period (clock.go).
	since        int64
	sinceMono    int64
	changed      bool  // some transition has happened (Adopt's staleness test needs it)
	openedAt     int64 // wall-clock unix ns at which the latest open period started
	liveFailures int64 // failures in the live bucket
	liveSlow     int64 // slow calls in the live bucket
	prevCalls    int64 // the bucket before the live one
	prevFailures int64
	prevSlow     int64
	openTally    Counts // the tally that opened the circuit, while open
	// The current (or, half-open, the last) open period (§5.13): the how-manyth
	// consecutive one, and its length. Both 0 while closed.
	opens          int
	openFor        time.Duration
	probesInFlight int
	probeCalls     int64
	probeSuccesses int64
	// A probe admitted at lastProbeAt (monotonic) has had no outcome after it
	// (awaitingProbe): the half-open period re-opens OpenTimeout after lastProbeAt (§5.3).
	awaitingProbe bool
	lastProbeAt   int64
	// tally counts for the retry budget and adaptive throttling while closed; nil when
	// neither is configured, or when not closed (tally.go).
	tally *tally
	// lim counts calls in flight against Policy.MaxInFlight (bulkhead.go): nil until a
	// policy first sets it, then kept, so that every call gives its slot back to the
	// counter it took it from.
	lim *limiter
	// cand is the candidate policy judged in shadow (SetCandidate), nil without one; spans
	// counts this breaker's opens and time open since it was set (on a candidate's shadow
	// breaker, since it was made). Both nil on a breaker without a candidate.
	cand  *candidate
	spans *spanTally
}

// New returns a breaker named name, closed (or open, if p.Mode is ModeForcedOpen). A policy
// that fails [Policy.Validate] is refused.
func New(name string, p Policy, opts ...Option) (*Breaker, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	o := core.Apply(opts)
	b := &Breaker{
		name:      name,
		isFailure: o.IsFailure,
		observers: o.Observers,
		errOpen:   &openError{breaker: name, reason: rejectOpen},
		errProbes: &openError{breaker: name, reason: rejectHalfOpenSaturated},
		errForced: &openError{breaker: name, reason: rejectForcedOpen},
		policy:    p.withDefaults(),

		errThrottled: &openError{breaker: name, reason: rejectThrottled},
	}
	for _, s := range []State{Closed, Open, HalfOpen} {
		b.errLimited[s] = &limitError{breaker: name, state: s}
	}
	if b.isFailure == nil {
		b.isFailure = isFailureByDefault
	}
	if o.Clock != nil {
		b.clock = core.NewReader(o.Clock)
	}
	for _, obs := range o.Observers {
		if co, ok := obs.(observe.CallObserver); ok {
			b.callObs = append(b.callObs, co)
		}
	}
	now := b.now()
	at := b.exactInstant()
	b.since, b.sinceMono = at.Wall, at.Mono
	if b.policy.Mode == ModeForcedOpen {
		// Created forced open, the circuit has an open period from now on (§5.7), and
		// Adopt must judge verdicts against it as it would had Update forced it open:
		// a Closed verdict from before it is about an older outage.
		b.state = Open
		b.changed, b.openedAt = true, at.Wall
		b.opens, b.openFor = 1, b.policy.openPeriod(1)
	}
	b.resetWindow(now)
	b.resetTally(now)
	b.publish()
	return b, nil
}

// Name returns the breaker's name.
func (b *Breaker) Name() string { return b.name }

// Policy returns the policy in force, with an empty Mode spelled ModeEnforce.
func (b *Breaker) Policy() Policy {
	b.mu.Lock()
	defer b.mu.Unlock()
	// A copy whose RetryBudget and Throttle are the caller's own: writing through them
	// must not change the breaker's policy behind Update's back.
	return b.policy.clone()
}

// now reads the monotonic timeline durations are measured on (internal/core's clock.go).
// It is small enough to inline into the call path: the coarse clock's reading is one
// atomic load, and everything else is a call.
func (b *Breaker) now() int64 {
	if n := atomic.LoadInt64(&core.Coarse.Nanos); n != 0 && b.clock == nil {
		return n
	}
	return b.nowSlow()
}

func (b *Breaker) nowSlow() int64 {
	if b.clock == nil {
		return core.CoarseNow()
	}
	return b.clock.Mono()
}

// exactInstant reads both clocks exactly, for transitions, where the cost of time.Now does
// not matter.
func (b *Breaker) exactInstant() core.Instant {
	if b.clock != nil {
		return b.clock.Instant()
	}
	return core.ExactInstant()
}

// State returns the circuit's state, first moving an open circuit whose timeout has passed
// to half-open, and a half-open one whose probes went unanswered for OpenTimeout back to
// open. Under ModeForcedOpen it is Open, under ModeForcedClosed Closed.
func (b *Breaker) State() State {
	p := b.cur.Load()
	if p.state == Closed || p.state == Open && b.now() < p.halfOpenAt {
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

// Trip opens the circuit now with the normal timeout. On a circuit already open it restarts
// the open period from now, keeping its length, but that is not a state change: no
// [observe.Transition] is delivered, so observers count nothing and adapters publish nothing (the
// shared verdict's Since catches up when an adapter next reads it). A circuit whose open
// period time has already ended is half-open, and Trip re-opens it as a transition. Under
// ModeForcedOpen or ModeForcedClosed it does nothing: the mode wins.
func (b *Breaker) Trip() {
	var pend pending
	b.mu.Lock()
	if m := b.policy.Mode; m != ModeForcedOpen && m != ModeForcedClosed {
		now := b.now()
		b.advance(now, &pend)
		if b.state == Open {
			b.restartOpen(b.exactInstant())
		} else {
			b.openNow(breakerconfig.ReasonManual, b.exactInstant(), now, &pend)
		}
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
	if p.equal(b.policy) {
		b.mu.Unlock()
		return nil
	}
	now := b.now()
	if b.state == Closed {
		b.roll(now)
	}
	widthChanged := p.Window != b.policy.Window
	periodChanged := p.OpenTimeout != b.policy.OpenTimeout || p.MaxOpenTimeout != b.policy.MaxOpenTimeout
	b.policy = p
	if widthChanged {
		b.reindex(now)
	}
	b.updateTally(now, widthChanged)
	if periodChanged && b.opens > 0 {
		// The open period running (or the last, half-open) is re-timed under the new
		// policy, from when it started.
		b.openFor = p.openPeriod(b.opens)
	}
	switch {
	case p.Mode == ModeForcedOpen && b.state != Open:
		b.openNow(breakerconfig.ReasonForced, b.exactInstant(), now, &pend)
	case p.Mode == ModeForcedClosed && b.state != Closed:
		b.transition(move{to: Closed, reason: breakerconfig.ReasonForced, counts: b.counts(now), at: b.exactInstant()}, now, &pend)
	case b.state == Closed:
		b.guardSlow(b.windowCounts())
	}
	b.publish()
	b.mu.Unlock()
	b.deliver(&pend)
	return nil
}

// RetryAfter reports how long until an open circuit admits probes: the rest of the open
// period, backed off under MaxOpenTimeout. ok is false when the circuit is not open, or is
// held open by ModeForcedOpen, whose end nobody knows.
func (b *Breaker) RetryAfter() (d time.Duration, ok bool) {
	p := b.cur.Load()
	if p.state != Open || p.halfOpenAt == math.MaxInt64 {
		return 0, false
	}
	d = time.Duration(max(p.halfOpenAt-b.now(), 0))
	if p.openFor > 0 {
		d = min(d, time.Duration(p.openFor))
	}
	return d, true
}
