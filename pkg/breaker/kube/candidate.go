package kube

import (
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// Candidate policies (docs/design.md §11): a config with a "candidate" makes the agent
// set it on the breaker (Breaker.SetCandidate), and the report entry carries what the
// candidate did in shadow. The candidate's transitions reach no observer, so the writer
// samples them when it samples traffic: every quarter of the breaker's window. A change
// of the candidate's state is written as any change of the entry is; its counts, which
// move with every call it would refuse, are written with other changes, and on their
// own at most once a window, as traffic is (traffic.go).

// candidatePolicy is the policy the config's candidate describes, nil without one.
func candidatePolicy(c *breakerconfig.Config) *breaker.Policy {
	if c == nil || c.Candidate == nil {
		return nil
	}
	p := policyOf(c.Candidate.Policy)
	return &p
}

// shadow is what the report says of a breaker's candidate; on: the breaker has one. It is
// comparable, as member is.
type shadow struct {
	on    bool
	state breaker.State
	since time.Time // to the millisecond
	start time.Time // to the millisecond
	// counts are written only when due (see above).
	counts shadowCounts
}

type shadowCounts struct {
	opens, wouldRefuse     int64
	timeOpen               time.Duration // to the millisecond
	enforcedOpens, refused int64
	enforcedTimeOpen       time.Duration
}

// shadowOf is what the report says of st: each count inside the schema's bound.
func shadowOf(st breaker.CandidateStats) shadow {
	c := func(n int64) int64 { return min(max(n, 0), breakerconfig.MaxCandidateCount) }
	return shadow{
		on: true, state: st.State, since: wireTime(st.Since), start: wireTime(st.Start),
		counts: shadowCounts{
			opens: c(st.Opens), wouldRefuse: c(st.WouldRefuse), timeOpen: st.TimeOpen.Truncate(time.Millisecond),
			enforcedOpens: c(st.Enforced.Opens), refused: c(st.Enforced.Refused), enforcedTimeOpen: st.Enforced.TimeOpen.Truncate(time.Millisecond),
		},
	}
}

// withCounts is s with the counts c: what goes into the entry at once keeps the counts
// last taken.
func (s shadow) withCounts(c shadowCounts) shadow {
	s.counts = c
	return s
}

// CandidateEntryOf is st as a report entry's candidate spells it (docs/design.md §7):
// what fuseboxd shows of a breaker's candidate.
func CandidateEntryOf(st breaker.CandidateStats) *breakerconfig.CandidateEntry {
	return candidateEntry(shadowOf(st))
}

// candidateEntry is s as the report spells it; nil when the breaker has no candidate.
func candidateEntry(s shadow) *breakerconfig.CandidateEntry {
	if !s.on {
		return nil
	}
	start := breakerconfig.NewTime(s.start)
	open, enforcedOpen := breakerconfig.Duration(s.counts.timeOpen), breakerconfig.Duration(s.counts.enforcedTimeOpen)
	return &breakerconfig.CandidateEntry{
		State: wireState(s.state), Since: breakerconfig.NewTime(s.since),
		Opens: s.counts.opens, WouldRefuse: s.counts.wouldRefuse,
		StartTime: &start, TimeOpen: &open,
		Enforced: &breakerconfig.CandidateBaseline{Opens: s.counts.enforcedOpens, Refused: s.counts.refused, TimeOpen: &enforcedOpen},
	}
}

// refreshCandidates samples the candidate of every reported breaker that has one, and
// puts its state (not its counts) in the entry's want at once. Candidate takes the
// breaker's lock, so it runs without r.mu.
func (r *reporter) refreshCandidates() {
	r.mu.Lock()
	var bs map[string]*breaker.Breaker
	for name, e := range r.entries {
		if e.reported && e.candidate != nil {
			if bs == nil {
				bs = map[string]*breaker.Breaker{}
			}
			bs[name] = e.candidate
		}
	}
	r.mu.Unlock()
	if len(bs) == 0 {
		return
	}
	latest := make(map[string]shadow, len(bs))
	for name, b := range bs {
		if st, ok := b.Candidate(); ok {
			latest[name] = shadowOf(st)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, s := range latest {
		if e := r.entries[name]; e != nil && e.candidate != nil {
			e.latestCandidate = s
			counts := e.want.candidate.counts
			if e.want.candidate.start != s.start {
				counts = s.counts // another candidate: its first counts go with it
			}
			e.want.candidate = s.withCounts(counts)
		}
	}
}

// candidateWindow is the shortest window among the reported breakers with a candidate,
// 0 when none has one: how often the writer samples them. Caller holds mu.
func (r *reporter) candidateWindow() time.Duration {
	var window time.Duration
	for _, e := range r.entries {
		if e.reported && e.candidate != nil && (window == 0 || e.candidateWindow < window) {
			window = e.candidateWindow
		}
	}
	return window
}

// takeCandidates puts the latest counts of every entry of names into the report ms (and
// the entries' want). Caller holds mu.
func (r *reporter) takeCandidates(names []string, ms []member) {
	for i, name := range names {
		if e := r.entries[name]; e.candidate != nil && e.latestCandidate.on {
			e.want.candidate = e.latestCandidate
			ms[i].candidate = e.latestCandidate
		}
	}
}

// candidatesMoved reports whether the counts of a candidate among names moved since they
// were last taken. Caller holds mu.
func (r *reporter) candidatesMoved(names []string) bool {
	for _, name := range names {
		if e := r.entries[name]; e.candidate != nil && e.latestCandidate.on && e.latestCandidate.counts != e.want.candidate.counts {
			return true
		}
	}
	return false
}

// configureCandidate sets the candidate of cfg on b (removing it without one) and makes
// the entry of b carry it. Caller holds no lock: SetCandidate takes b's.
func (a *applier) configureCandidate(b *breaker.Breaker, cfg *breakerconfig.Config) {
	p := candidatePolicy(cfg)
	if err := b.SetCandidate(p); err != nil {
		// Parse validated the candidate, so this is a bug, not bad input.
		a.log.Error("Breaker refused a validated candidate policy", "breaker", b.Name(), "error", err)
		p = nil
	}
	if a.rep == nil {
		return
	}
	a.rep.mu.Lock()
	defer a.rep.mu.Unlock()
	e := a.rep.entry(b.Name())
	if p == nil {
		e.candidate, e.candidateWindow, e.latestCandidate, e.want.candidate = nil, 0, shadow{}, shadow{}
		return
	}
	e.candidate, e.candidateWindow = b, p.Window
}
