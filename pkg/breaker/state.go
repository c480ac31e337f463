package breaker

import (
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/internal/core"
	"github.com/fusebox-dev/fusebox/pkg/breaker/observe"
)

// The state machine (§5.1–§5.4): what an outcome does to the state, the transitions
// themselves, and the lazy open → half-open move. Every function here runs with mu held;
// the transitions it makes are collected in a pending and delivered after the lock.

// record applies the outcome of a call admitted in the current period; slow says the call
// took at least SlowCallDuration (§5.13). Caller holds mu.
func (b *Breaker) record(now int64, o observe.Outcome, slow bool, err error, pend *pending) observe.Outcome {
	switch b.state {
	case Closed:
		if o == observe.OutcomeIgnored {
			return o
		}
		b.roll(now)
		b.bucket.Load().stripes[0].calls.Add(1) // under mu the bucket is live
		if slow {
			b.liveSlow++
		}
		if o == observe.OutcomeFailure {
			b.liveFailures++
			b.bucket.Load().failures.Add(1)
			defer b.armThrottle()
		}
		if b.policy.Mode == ModeForcedClosed {
			return o
		}
		// Failures are judged after a failure (utopia-php/circuit-breaker's rule), slow calls after any
		// call: a fast success can bring the window to MinimumThroughput calls.
		c := b.windowCounts()
		switch {
		case o == observe.OutcomeFailure && c.Calls >= int64(b.policy.MinimumThroughput) && float64(c.Failures)/float64(c.Calls) >= b.policy.FailureRatio:
			b.transition(move{to: Open, reason: breakerconfig.ReasonTripped, trigger: breakerconfig.TriggerFailureRate, counts: c, err: err, at: b.exactInstant()}, now, pend)
		case b.slowTrips(c):
			b.transition(move{to: Open, reason: breakerconfig.ReasonTripped, trigger: breakerconfig.TriggerSlowCallRate, counts: c, err: err, at: b.exactInstant()}, now, pend)
		default:
			b.guardSlow(c)
		}
	case HalfOpen:
		// Every recorded call admitted while half-open is a probe. Whatever its outcome,
		// it is an answer: no probe is leaked now but those that still hold a slot.
		if b.probesInFlight > 0 {
			b.probesInFlight--
		}
		b.awaitingProbe = false
		switch {
		case o == observe.OutcomeFailure:
			c := Counts{Calls: b.probeCalls + 1, Failures: 1, Successes: b.probeSuccesses, Slow: b2i(slow)}
			b.transition(move{to: Open, reason: breakerconfig.ReasonProbeFailed, trigger: breakerconfig.TriggerFailedProbe, counts: c, err: err, at: b.exactInstant()}, now, pend)
		case o == observe.OutcomeSuccess && slow:
			// A slow probe is a failed probe: the dependency answers, too late.
			c := Counts{Calls: b.probeCalls + 1, Successes: b.probeSuccesses, Slow: 1}
			b.transition(move{to: Open, reason: breakerconfig.ReasonProbeFailed, trigger: breakerconfig.TriggerSlowProbe, counts: c, at: b.exactInstant()}, now, pend)
		case o == observe.OutcomeSuccess:
			b.probeCalls++
			b.probeSuccesses++
			if b.probeSuccesses >= int64(b.policy.SuccessThreshold) {
				b.transition(move{to: Closed, reason: breakerconfig.ReasonProbesSucceeded, counts: b.probeCounts(), at: b.exactInstant()}, now, pend)
			}
		}
	}
	return o
}

// slowTrips reports whether the window c opens the circuit on its slow calls. Caller holds
// mu.
func (b *Breaker) slowTrips(c Counts) bool {
	return b.policy.SlowCallDuration > 0 && c.Slow > 0 && c.Calls >= int64(b.policy.MinimumThroughput) &&
		float64(c.Slow)/float64(c.Calls) >= b.policy.SlowCallRatio
}

// guardSlow tells the lock-free success path of the live bucket whether a success could
// open the circuit on slow calls, so that it takes the lock and judges the window instead.
// A fast success only lowers the slow-call rate, so it can open the circuit only by bringing
// the window up to MinimumThroughput calls, or on a window that reached the rate without a
// call (a roll dropped a bucket of fast calls): while either may happen, successes take the
// lock, which is at most MinimumThroughput calls per bucket. Caller holds mu and has rolled.
func (b *Breaker) guardSlow(c Counts) {
	bk := b.bucket.Load()
	guard := b.policy.SlowCallDuration > 0 && b.policy.Mode != ModeForcedClosed && b.state == Closed && c.Slow > 0 &&
		(c.Calls < int64(b.policy.MinimumThroughput) || float64(c.Slow)/float64(c.Calls) >= b.policy.SlowCallRatio)
	bk.guard(guard)
}

func b2i(v bool) int64 {
	if v {
		return 1
	}
	return 0
}

func (b *Breaker) probeCounts() Counts {
	return Counts{Calls: b.probeCalls, Successes: b.probeSuccesses}
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

// move is one transition to make.
type move struct {
	to      State
	reason  string // breakerconfig.Reason*: Transition.Reason
	trigger string // breakerconfig.Trigger*: Transition.Trigger
	counts  Counts // the counts behind it (Transition.Counts)
	err     error
	// at is when the state is reached (for an adopted verdict, its Since).
	at core.Instant
	// For a move to Open: the open period entered, as a verdict carried it (Adopt); 0
	// means the next consecutive open period under the policy (§5.13).
	opens   int
	openFor time.Duration
}

// transition makes m and starts a new state period. Caller holds mu. now is the monotonic
// reading the window restarts from.
func (b *Breaker) transition(m move, now int64, pend *pending) {
	from := b.state
	b.gen++
	b.state = m.to
	b.since, b.sinceMono = m.at.Wall, m.at.Mono
	b.changed = true
	switch m.to {
	case Open:
		b.openTally = Counts{Calls: m.counts.Calls, Failures: m.counts.Failures, Slow: m.counts.Slow}
		b.openedAt = m.at.Wall
		b.opens, b.openFor = b.opens+1, 0
		if m.opens > 0 {
			b.opens = m.opens
		}
		if b.openFor = m.openFor; b.openFor <= 0 {
			b.openFor = b.policy.openPeriod(b.opens)
		}
	case Closed:
		b.openTally = Counts{}
		b.opens, b.openFor = 0, 0
	}
	b.probesInFlight, b.probeCalls, b.probeSuccesses = 0, 0, 0
	b.awaitingProbe = false
	if b.spans != nil {
		b.spans.moved(m.to, now)
	}
	// Every transition replaces the live bucket, even on opening (whose tally is kept in
	// openTally): that is what tells the lock-free path its result is stale.
	b.resetWindow(now)
	b.resetTally(now)
	b.publish()
	t := observe.Transition{Breaker: b.name, From: from, To: m.to, At: time.Unix(0, m.at.Wall), Counts: m.counts, Err: m.err, Reason: m.reason, Trigger: m.trigger, Period: b.gen}
	if m.to != Closed {
		t.ConsecutiveOpens, t.OpenTimeout = b.opens, b.openFor
	}
	pend.add(t)
}

// openNow opens the circuit for Trip, a forced mode or Adopt, keeping the tally that
// opened it. Caller holds mu.
func (b *Breaker) openNow(reason string, at core.Instant, now int64, pend *pending) {
	b.transition(move{to: Open, reason: reason, counts: b.counts(now), at: at}, now, pend)
}

// restartOpen starts the open period again at at, keeping its length and the tally that
// opened it: Trip on an open circuit. It is not a transition, so the state period (and with
// it the staleness of calls in flight) stays the same. Caller holds mu.
func (b *Breaker) restartOpen(at core.Instant) {
	b.since, b.sinceMono, b.openedAt = at.Wall, at.Mono, at.Wall
	b.publish()
}

// openUntil is when, on the monotonic timeline, the open period ends. Caller holds mu.
func (b *Breaker) openUntil() int64 { return core.AddSat(b.sinceMono, int64(b.openFor)) }

// advance applies the moves that time alone makes, lazily, when a call or a reader next
// looks (caller holds mu). Each is dated when time made it, however late it is noticed:
// dated later, it would make a verdict reached elsewhere in between (a fleet's next open
// period, or its close) look older than this state, and Adopt would refuse it as stale.
// The moves:
//
//   - open → half-open, once the open period (OpenTimeout, or its backed-off length under
//     MaxOpenTimeout) has passed since it started;
//   - half-open → open, OpenTimeout after the last probe was admitted if no probe outcome
//     has arrived since (§5.3). A probe whose done is never called (a goroutine that
//     leaked, a body nobody closed) would otherwise hold its slot for ever, and with every
//     slot held the circuit would refuse every call for good. Re-opening starts a new open
//     period, so the next probes come after the usual wait, and the late done is stale. The
//     transition's reason is TimedOut: like open → half-open it is the clock's doing,
//     not a judgement of calls, so a fleet does not count it as an earned Open.
func (b *Breaker) advance(now int64, pend *pending) {
	switch b.state {
	case Open:
		if end := b.openUntil(); b.policy.Mode != ModeForcedOpen && now >= end {
			b.transition(move{to: HalfOpen, reason: breakerconfig.ReasonTimedOut, counts: b.openTally, at: b.exactInstant().At(end)}, now, pend)
		}
	case HalfOpen:
		if end := core.AddSat(b.lastProbeAt, int64(b.policy.OpenTimeout)); b.awaitingProbe && now >= end {
			b.transition(move{to: Open, reason: breakerconfig.ReasonTimedOut, counts: b.probeCounts(), at: b.exactInstant().At(end)}, now, pend)
		}
	}
}

// pending collects the transitions made under the lock, to be delivered after it.
type pending struct {
	n int
	t [2]observe.Transition
}

func (p *pending) add(t observe.Transition) {
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
