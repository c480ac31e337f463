package breaker

import "math/rand/v2"

// Adaptive throttling (docs/design.md §5.16): a closed breaker rejects a call locally with
// probability max(0, (requests − k × accepts) / (requests + 1)) over the window, so that a
// dependency that rejects much of what it is sent sees less of it long before the failure
// rate opens the circuit. The decision reads the tally (tally.go) without the lock.

// beyond is what the call path needs about the retry budget and adaptive throttling; it is
// part of every period (admit.go).
type beyond struct {
	// tally counts calls while closed with a budget or throttling configured; nil
	// otherwise, when the call path does not count at all.
	tally *tally
	// throttleK is Throttle.K, or 0 when calls are not throttled: no Throttle, or a mode
	// that never refuses a closed call (MetricsOnly, ForcedClosed).
	throttleK float64
	// minThroughput is the policy's MinimumThroughput: fewer requests than this in the
	// window, and throttling judges the fleet's figures instead of the pod's.
	minThroughput int64
	// budget is the retry budget; nil: retries are not budgeted.
	budget *RetryBudget
	// retryRefusal is the error a retry is refused with while the circuit refuses calls
	// (open under Enforce or ForcedOpen), until halfOpenAt; nil when it does not.
	retryRefusal error
}

// publishBeyond fills p's beyond for publish. Caller holds mu.
func (b *Breaker) publishBeyond(p *period) {
	pol := &b.policy
	if b.state == Closed {
		p.tally = b.tally
	}
	if pol.Throttle != nil && pol.Mode == ModeEnforce {
		p.throttleK = pol.Throttle.K
	}
	p.minThroughput = int64(pol.MinimumThroughput)
	p.budget = pol.RetryBudget
	if b.state == Open {
		switch pol.Mode {
		case ModeEnforce:
			p.retryRefusal = b.errOpen
		case ModeForcedOpen:
			p.retryRefusal = b.errForced
		}
	}
}

// counting reports whether the policy asks for a tally.
func (p *Policy) counting() bool { return p.RetryBudget != nil || p.Throttle != nil }

// resetTally starts an empty tally for a closed period when the policy counts, and drops it
// otherwise: like the failure window, it is the closed state's, and a circuit that closes
// starts counting afresh. Caller holds mu (or owns b).
func (b *Breaker) resetTally(now int64) {
	b.tally = nil
	if b.state == Closed && b.policy.counting() {
		b.tally = newTally(int64(b.policy.Window), now)
	}
}

// updateTally keeps the tally across Update (re-cut for a new width), starts one when a
// closed breaker gains a budget or throttling, and drops it when it loses both. Caller
// holds mu and has set the new policy.
func (b *Breaker) updateTally(now int64, widthChanged bool) {
	switch {
	case b.state != Closed || !b.policy.counting():
		b.tally = nil
	case b.tally == nil:
		b.tally = newTally(int64(b.policy.Window), now)
	case widthChanged:
		b.tally = b.tally.reindexed(int64(b.policy.Window), now)
	}
}

// admitTallied is admit's closed path when the tally counts.
func (b *Breaker) admitTallied(p *period) (ticket, error) {
	if p.throttleK != 0 && b.throttled(p, b.now()) {
		return ticket{}, b.errThrottled
	}
	return ticket{p, true}, nil
}

// throttled reports whether adaptive throttling rejects a call asked of the closed breaker,
// and counts it as a request if so; an admitted call is counted when it finishes
// (tallyOutcome), with its outcome, in one atomic add. The probability is judged on the
// requests and accepts before this one (the +1 of the formula is this one), and on the
// fleet's figures when the pod's window holds fewer than MinimumThroughput requests and the
// fleet's are known.
func (b *Breaker) throttled(p *period, now int64) bool {
	if p.throttleK == 0 {
		return false
	}
	bk, requests, accepts := p.tally.requestsAccepts(now)
	if requests < p.minThroughput {
		if f := b.fleet.Load(); f != nil {
			requests, accepts = f.Requests, f.Accepts
		}
	}
	// A healthy window (requests ≤ k × accepts) costs no division and no draw.
	if float64(requests) <= p.throttleK*float64(accepts) {
		return false
	}
	if b.random() < throttleProbability(requests, accepts, p.throttleK) {
		bk.traffic.Add(oneRequest)
		bk.throttled.Add(1)
		return true
	}
	return false
}

// throttleProbability is max(0, (requests − k × accepts) / (requests + 1)) (§5.16).
func throttleProbability(requests, accepts int64, k float64) float64 {
	r := float64(requests)
	return max(0, (r-k*float64(accepts))/(r+1))
}

// tallyOutcome counts a finished call as a request, and as an accept when it succeeded
// (§5.6: a nil error, or one the classifier does not count as a failure, except
// context.Canceled).
func (b *Breaker) tallyOutcome(p *period, err error, panicked bool) {
	d := uint64(oneRequest)
	if err == nil && !panicked || err != nil && !panicked && b.classify(err, false) == OutcomeSuccess {
		d += oneAccept
	}
	now := b.now()
	bk := p.tally.live.Load()
	if now < bk.start || now >= bk.end {
		bk = p.tally.roll(now)
	}
	bk.traffic.Add(d)
}

func (b *Breaker) random() float64 {
	if b.rnd != nil {
		return b.rnd()
	}
	return rand.Float64()
}
