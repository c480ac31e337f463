package breaker

import (
	"sync/atomic"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker/internal/core"
)

// Candidate policies (§11): a second policy judged in shadow on the calls the breaker
// runs. The candidate is a breaker of its own, never seen outside this file and
// candidate_call.go, held in ModeMetricsOnly: it admits every call, so it refuses none
// and makes none of its own, and a call it would have refused (open, or half-open with its
// probe slots full) runs unrecorded, as MetricsOnly runs it, and is counted in
// WouldRefuse. Its half-open period is judged on the probes it takes from the calls that
// ran. It shares the breaker's clock and classifier, so it judges the same outcomes on the
// same timeline, but no verdict: what a fleet shares is the enforced state.

// CandidateStats is what the candidate policy did in shadow since SetCandidate set it, and
// what the enforced policy did over the same span, so that the two compare like for like.
type CandidateStats struct {
	// State is the candidate's state and Since when it was reached.
	State State
	Since time.Time
	// Opens counts the candidate's transitions to open since it was set.
	Opens int64
	// WouldRefuse counts the calls the candidate would have refused that ran: the
	// enforced policy admitted them while the candidate was open, or half-open with its
	// probe slots full.
	WouldRefuse int64
	// Start is when the candidate was set: the span every figure here covers.
	Start time.Time
	// TimeOpen is how long the candidate was open or half-open since Start.
	TimeOpen time.Duration
	// Policy is the candidate's policy, with its defaults filled in and the mode it is
	// judged in (ModeMetricsOnly).
	Policy Policy
	// Enforced is what the enforced policy did over the same span.
	Enforced struct {
		// Opens counts the breaker's transitions to open since the candidate was set.
		Opens int64
		// Refused counts the calls it short-circuited since then, open, forced open or
		// with its probe slots full; not those adaptive throttling rejected.
		Refused int64
		// TimeOpen is how long it was open or half-open.
		TimeOpen time.Duration
	}
}

// candidate is a candidate policy being judged: its shadow breaker and what the call path
// counts for it without a lock.
type candidate struct {
	b           *Breaker // the shadow: ModeMetricsOnly, no retry budget, no throttling
	policy      Policy   // as SetCandidate was given it, with defaults: what an equal one is compared with
	wouldRefuse atomic.Int64
	refused     atomic.Int64 // the enforced policy's refusals (CandidateStats.Enforced.Refused)
	// slow and exact are the shadow's slow-call threshold and whether it is timed on the
	// exact clock: a period with the candidate times its calls for either judgement.
	slow  int64
	exact bool
	start int64 // wall clock, unix ns
}

// spanTally counts a breaker's opens and how long it was open or half-open, from a start.
// Guarded by its breaker's mu.
type spanTally struct {
	opens    int64
	timeOpen int64 // ns, the open stretches that ended
	outSince int64 // monotonic, when the current open or half-open stretch began
	out      bool  // open or half-open now
}

func newSpanTally(s State, now int64) *spanTally {
	return &spanTally{out: s != Closed, outSince: now}
}

// moved counts a transition to state to at now (monotonic). Caller holds its breaker's mu.
func (s *spanTally) moved(to State, now int64) {
	if to == Open {
		s.opens++
	}
	switch out := to != Closed; {
	case out && !s.out:
		s.outSince = now
	case !out && s.out:
		s.timeOpen += max(core.SubSat(now, s.outSince), 0)
	}
	s.out = to != Closed
}

// openFor is the time open or half-open up to now.
func (s *spanTally) openFor(now int64) time.Duration {
	d := s.timeOpen
	if s.out {
		d = core.AddSat(d, max(core.SubSat(now, s.outSince), 0))
	}
	return time.Duration(d)
}

// SetCandidate sets the policy judged in shadow beside the one enforced (§11), or with nil
// removes it. The candidate sees every call the breaker runs and judges its outcome as
// the enforced policy judges it, but it never refuses a call: what it would have done is
// only counted ([Breaker.Candidate]). Its Mode is ignored (it is judged as ModeMetricsOnly
// judges), and so are RetryBudget, Throttle and the concurrency limit (MaxInFlight,
// MaxWait, Adaptive), which do not open a circuit. A policy
// equal to the candidate already set changes nothing, so a source may set it on every
// configuration it applies; a different one starts afresh, every count from zero. An
// invalid policy is refused with an error naming the field, and the old candidate stays.
//
// A breaker without a candidate pays nothing for the feature; with one, a closed call
// costs one more lock-free window add.
func (b *Breaker) SetCandidate(p *Policy) error {
	if p == nil {
		b.mu.Lock()
		if b.cand != nil {
			b.cand, b.spans = nil, nil
			b.publish()
		}
		b.mu.Unlock()
		return nil
	}
	if err := p.Validate(); err != nil {
		return err
	}
	q := p.withDefaults()
	q.Mode, q.RetryBudget, q.Throttle = ModeMetricsOnly, nil, nil
	q.MaxInFlight, q.MaxWait, q.Adaptive = 0, 0, nil
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cand != nil && b.cand.policy.equal(q) {
		return nil
	}
	b.cand = b.newCandidate(q)
	b.spans = newSpanTally(b.state, b.now())
	b.publish()
	return nil
}

// newCandidate builds the shadow breaker for q on b's clock and classifier. Caller holds
// b's mu.
func (b *Breaker) newCandidate(q Policy) *candidate {
	sh := &Breaker{name: b.name, clock: b.clock, isFailure: b.isFailure, policy: q}
	sh.errOpen = &openError{breaker: b.name, reason: rejectOpen}
	sh.errProbes = &openError{breaker: b.name, reason: rejectHalfOpenSaturated}
	sh.errForced = &openError{breaker: b.name, reason: rejectForcedOpen}
	sh.errThrottled = &openError{breaker: b.name, reason: rejectThrottled}
	now := sh.now()
	at := sh.exactInstant()
	sh.since, sh.sinceMono = at.Wall, at.Mono
	sh.spans = newSpanTally(Closed, now)
	sh.resetWindow(now)
	sh.resetTally(now)
	sh.publish()
	c := &candidate{b: sh, policy: q, start: at.Wall}
	if d := q.SlowCallDuration; d > 0 {
		c.slow, c.exact = int64(d), b.clock == nil && d < coarseEnough
	}
	return c
}

// publishCandidate makes the period p being published send its calls through the
// candidate, if there is one. Caller holds mu.
func (b *Breaker) publishCandidate(p *period) {
	c := b.cand
	if c == nil {
		return
	}
	p.cand, p.base, p.admit = c, p.admit, admitShadowed
	p.shadow, p.untimed = c.b, p.slow == 0 && c.slow == 0
	p.exact = p.exact || c.exact
}

// Candidate returns what the candidate policy did in shadow since it was set, and false
// when the breaker has none.
func (b *Breaker) Candidate() (CandidateStats, bool) {
	b.mu.Lock()
	c := b.cand
	if c == nil {
		b.mu.Unlock()
		return CandidateStats{}, false
	}
	// The enforced circuit is not advanced: time alone moves it only between open and
	// half-open, which its time open does not tell apart.
	now := b.now()
	enforcedOpens, enforcedTimeOpen := b.spans.opens, b.spans.openFor(now)
	b.mu.Unlock()

	sh := c.b
	var none pending // the shadow has no observers: nothing to deliver
	sh.mu.Lock()
	sh.advance(now, &none)
	st := CandidateStats{
		State: sh.state, Since: time.Unix(0, sh.since), Opens: sh.spans.opens,
		Start: time.Unix(0, c.start), TimeOpen: sh.spans.openFor(now), Policy: sh.policy.clone(),
	}
	sh.mu.Unlock()
	st.WouldRefuse = c.wouldRefuse.Load()
	st.Enforced.Opens, st.Enforced.TimeOpen = enforcedOpens, enforcedTimeOpen
	st.Enforced.Refused = c.refused.Load()
	return st, true
}
