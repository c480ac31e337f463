package breaker

import "time"

// The state machine (§5.1–§5.4): what an outcome does to the state, the transitions
// themselves, and the lazy open → half-open move. Every function here runs with mu held;
// the transitions it makes are collected in a pending and delivered after the lock.

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
			b.transition(Open, CauseCalls, c, err, b.exactInstant(), now, pend)
		}
	case HalfOpen:
		// Every recorded call admitted while half-open is a probe. Whatever its outcome,
		// it is an answer: no probe is leaked now but those that still hold a slot.
		if b.probesInFlight > 0 {
			b.probesInFlight--
		}
		b.awaitingProbe = false
		switch o {
		case OutcomeSuccess:
			b.probeCalls++
			b.probeSuccesses++
			if b.probeSuccesses >= int64(b.policy.SuccessThreshold) {
				b.transition(Closed, CauseCalls, b.probeCounts(), nil, b.exactInstant(), now, pend)
			}
		case OutcomeFailure:
			c := Counts{Calls: b.probeCalls + 1, Failures: 1, Successes: b.probeSuccesses}
			b.transition(Open, CauseCalls, c, err, b.exactInstant(), now, pend)
		}
	}
	return o
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

// transition moves to state to and starts a new state period. Caller holds mu.
// at is when the state is reached (for an adopted verdict, its Since), now the monotonic
// reading the window restarts from.
func (b *Breaker) transition(to State, cause TransitionCause, c Counts, err error, at instant, now int64, pend *pending) {
	from := b.state
	b.gen++
	b.state = to
	b.since, b.sinceMono = at.wall, at.mono
	b.changed = true
	switch to {
	case Open:
		b.openTally = Counts{Calls: c.Calls, Failures: c.Failures}
		b.openedAt = at.wall
	case Closed:
		b.openTally = Counts{}
	}
	b.probesInFlight, b.probeCalls, b.probeSuccesses = 0, 0, 0
	b.awaitingProbe = false
	// Every transition replaces the live bucket, even on opening (whose tally is kept in
	// openTally): that is what tells the lock-free path its result is stale.
	b.resetWindow(now)
	b.publish()
	pend.add(Transition{Breaker: b.name, From: from, To: to, At: time.Unix(0, at.wall), Counts: c, Err: err, Cause: cause, Period: b.gen})
}

// openNow opens the circuit for Trip, a forced mode or Adopt, keeping the tally that
// opened it. Caller holds mu.
func (b *Breaker) openNow(cause TransitionCause, at instant, now int64, pend *pending) {
	c := b.counts(now)
	b.transition(Open, cause, c, nil, at, now, pend)
}

// advance applies the moves that time alone makes, lazily, when a call or a reader next
// looks (caller holds mu):
//
//   - open → half-open, OpenTimeout after the open period started;
//   - half-open → open, OpenTimeout after the last probe was admitted if no probe outcome
//     has arrived since (§5.3). A probe whose done is never called (a goroutine that
//     leaked, a body nobody closed) would otherwise hold its slot for ever, and with every
//     slot held the circuit would refuse every call for good. Re-opening starts a new open
//     period, so the next probes come after the usual wait, and the late done is stale. The
//     transition's cause is CauseTimeout: like open → half-open it is the clock's doing,
//     not a judgement of calls, so a fleet does not count it as an earned Open.
func (b *Breaker) advance(now int64, pend *pending) {
	switch b.state {
	case Open:
		if b.policy.Mode != ModeForcedOpen && now >= addSat(b.sinceMono, int64(b.policy.OpenTimeout)) {
			b.transition(HalfOpen, CauseTimeout, b.openTally, nil, b.exactInstant(), now, pend)
		}
	case HalfOpen:
		if b.awaitingProbe && now >= addSat(b.lastProbeAt, int64(b.policy.OpenTimeout)) {
			b.transition(Open, CauseTimeout, b.probeCounts(), nil, b.exactInstant(), now, pend)
		}
	}
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
