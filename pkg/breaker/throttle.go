package breaker

import (
	"context"
	"math/rand/v2"
)

// Adaptive throttling (docs/design.md §5.16): a closed breaker rejects a call locally with
// probability max(0, (requests − k × accepts) / (requests + 1)) over the window, so that a
// dependency that rejects much of what it is sent sees less of it long before the failure
// rate opens the circuit. The decision reads the tally (tally.go) without the lock.

// tallied is what the call path needs about the retry budget and adaptive throttling; it is
// part of every period (admit.go).
type tallied struct {
	// tally counts calls while closed with a budget or throttling configured; nil
	// otherwise, when the call path does not count at all.
	tally *tally
	// throttleK is Throttle.K, or 0 when calls are not throttled: no Throttle, or a mode
	// that never refuses a closed call (MetricsOnly, ForcedClosed).
	throttleK float64
	// minThroughput is the policy's MinimumThroughput: fewer requests than this in the
	// window, and throttling judges the fleet's figures instead of the pod's.
	minThroughput int64
	// budget is the retry budget; nil: retries are not budgeted. retryShare is its
	// Percent as a fraction, floorPerNano its MinPerSecond per nanosecond, worked out once
	// here rather than on every check.
	budget                   *RetryBudget
	retryShare, floorPerNano float64
	// retryRefusal is the error a retry is refused with while the circuit refuses calls
	// (open under Enforce or ForcedOpen), until halfOpenAt; nil when it does not.
	retryRefusal error
}

// publishTallied fills p's tallied for publish. Caller holds mu.
func (b *Breaker) publishTallied(p *period) {
	pol := &b.policy
	if b.state == Closed {
		p.tally = b.tally
	}
	if pol.Throttle != nil && pol.Mode == ModeEnforce {
		p.throttleK = pol.Throttle.K
	}
	p.minThroughput = int64(pol.MinimumThroughput)
	p.budget = pol.RetryBudget
	if p.budget != nil {
		p.retryShare = float64(p.budget.Percent) / 100
		p.floorPerNano = float64(p.budget.MinPerSecond) / 1e9
	}
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

// admitTallied is admit's closed path with a retry budget or throttling configured: a
// throttled call takes no slot of the concurrency limit.
func (b *Breaker) admitTallied(ctx context.Context, p *period) (ticket, error) {
	if p.throttleK != 0 && b.throttled(p, b.now()) {
		return ticket{}, b.errThrottled
	}
	if p.lim != nil {
		return b.slotFor(ctx, p)
	}
	return ticket{p: p, recorded: true}, nil
}

// throttled reports whether adaptive throttling rejects a call asked of the closed breaker,
// and counts it as a request if so; an admitted call is counted when it finishes
// (tallyOutcome), with its outcome, in one atomic add. The probability is judged on the
// requests and accepts before this one (the +1 of the formula is this one), and on the
// fleet's figures when the pod's window holds fewer than MinimumThroughput requests and the
// fleet's are known.
func (b *Breaker) throttled(p *period, now int64) bool {
	// Unarmed, the window was healthy when last judged (armThrottle), and stays so until
	// its live bucket ends: a roll not made yet is judged here.
	live := b.bucket.Load()
	if p.throttleK == 0 || !b.throttleArmed.Load() && now < live.end {
		return false
	}
	bk, c := p.tally.window(now, live)
	requests, accepts := c.requests, c.accepts
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

func (b *Breaker) random() float64 {
	if b.rnd != nil {
		return b.rnd()
	}
	return rand.Float64()
}

// armThrottle sets whether throttling could refuse a call: whether the window (or the
// fleet's figures, for a pod with too few requests of its own) is unhealthy, requests >
// K × accepts. Only a failure, a throttled call, a roll of the window, a transition, a
// policy or a fleet change can make it so: a success adds one request and one accept,
// which lowers requests − K × accepts since K ≥ 1. So it is judged under mu at each of
// those (a throttled call needs none: it happens only while armed), and a healthy window
// costs the call path one load instead of the decision. A window that successes have made
// healthy again stays armed until the next judgement, and the full decision, which finds
// it healthy, runs meanwhile. Caller holds mu.
func (b *Breaker) armThrottle() {
	armed := false
	if t := b.policy.Throttle; t != nil && b.policy.Mode == ModeEnforce && b.state == Closed && b.tally != nil {
		now := b.now()
		_, c := b.tally.window(now, b.bucket.Load())
		requests, accepts := c.requests, c.accepts
		if requests < int64(b.policy.MinimumThroughput) {
			if f := b.fleet.Load(); f != nil {
				requests, accepts = f.Requests, f.Accepts
			}
		}
		armed = float64(requests) > t.K*float64(accepts)
	}
	if b.throttleArmed.Load() != armed {
		b.throttleArmed.Store(armed)
	}
}
