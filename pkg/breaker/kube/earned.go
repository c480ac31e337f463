package kube

import (
	"math/rand/v2"
	"slices"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// Earned first (docs/semantics.md, "Fleet"): a change of the report that only says what
// the pod was told or what time did (reasons Adopted, Forced, TimedOut, Started) moves no
// fleet decision, so it waits a short, jittered hold before it is written, and goes with
// whatever changed meanwhile. A change the fleet decides on (an earned state: Tripped,
// Manual, ProbeFailed, ProbesSucceeded), a new config generation or refusal, a breaker
// leaving the report, and any change of a Group's entry (its keys' states are summed, not
// told apart) go at once, taking every held
// change with them.
//
// When a fleet opens, every pod adopts the verdict within the same moment; without the
// hold each would write its Adopted entry at once, a second storm right behind the earned
// reports that decided the incident, in the same priority level, as the operator is
// counting them.
//
// A change that is no transition at all is not written on its own: an Open verdict adopted
// by a circuit already open only re-times its open period (a pod that tripped, echoing the
// fleet's verdict), and Trip on an open circuit restarts it. Neither tells the fleet
// anything: the operator counts each entry's state and what each pod earned, and computes
// open periods from the spec, never from a report. It goes with the next write made for
// another reason. Without this rule each pod that earned the fleet's Open wrote twice
// per incident, its earned Open and then its echo, and once more for each re-timing the
// operator published.

// The hold's bounds. At least 100 ms: the verdict reaches the pods over one ConfigMap
// watch within tens of milliseconds of each other, and the earned writes that opened the
// fleet are queued by then; a hold drawn from 400 ms spreads N adopting pods' writes at
// N/400 a millisecond instead of N at once (5,000 pods: 12.5/ms), which the API server
// absorbs. At most 500 ms: the CircuitBreaker's member counts, which count adopted pods,
// lag the pods by no more than that, and a pod that adopts and then times out within the
// hold writes once.
const (
	minUnearnedDelay = 100 * time.Millisecond
	maxUnearnedDelay = 500 * time.Millisecond
)

// noHold is the hold of a pod that reports through its node's agent: none. The agent
// holds the echoes of all its node's pods for one write of the node's report
// (internal/nodeagent, pacing.go), and a request to it costs the API server nothing, so a
// hold here would only make every echo later. A re-timing alone still waits for another
// change (held).
func noHold() time.Duration { return 0 }

// unearnedDelay draws one hold, uniformly in [minUnearnedDelay, maxUnearnedDelay).
func unearnedDelay() time.Duration {
	return minUnearnedDelay + rand.N(maxUnearnedDelay-minUnearnedDelay)
}

// holdState is one hold: running from the first unearned change not yet written until
// its timer ends it, or a write does.
type holdState struct {
	timer *time.Timer
	over  bool   // the timer fired: the held changes are due
	seq   uint64 // which hold the timer belongs to, so a late timer ends no newer hold
}

// end forgets the hold: a write took its changes.
func (h *holdState) end() {
	if h.timer != nil {
		h.timer.Stop()
	}
	h.timer, h.over = nil, false
	h.seq++
}

// held reports whether the differences between names/ms and what the API server holds
// are all unearned and their hold is still running, starting the hold if none runs.
// Caller holds mu.
func (r *reporter) held(names []string, ms []member) bool {
	if r.holdFor == nil || r.hold.over || r.urgent(names, ms) {
		return false
	}
	if r.retimed(names, ms) {
		return true // no hold: nothing here is due, ever, on its own
	}
	if r.hold.timer == nil {
		seq := r.hold.seq
		r.hold.timer = time.AfterFunc(r.holdFor(), func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.hold.seq == seq {
				r.hold.over = true
				r.signal()
			}
		})
	}
	return true
}

// retimed reports whether names and ms differ from the written report only in entries
// that made no transition since they were written. Caller holds mu and has found nothing
// urgent.
func (r *reporter) retimed(names []string, ms []member) bool {
	if !slices.Equal(names, r.names) {
		return false
	}
	for i, m := range ms {
		if !sameTransition(m, r.written[i]) {
			return false
		}
	}
	return true
}

// sameTransition reports whether m is w's transition, at most re-timed: the same period,
// state and reason, config generation and refusal, traffic and candidate.
func sameTransition(m, w member) bool {
	return !m.group && m.period == w.period && m.state == w.state && m.reason == w.reason &&
		m.generation == w.generation && m.configErr == w.configErr && m.traffic == w.traffic && m.candidate == w.candidate
}

// urgent reports whether the report of names and ms differs from the written one in
// anything that goes at once. Caller holds mu.
func (r *reporter) urgent(names []string, ms []member) bool {
	for _, name := range r.names {
		if _, found := slices.BinarySearch(names, name); !found {
			return true // a breaker left the report
		}
	}
	for i, name := range names {
		m := ms[i]
		j, found := slices.BinarySearch(r.names, name)
		switch {
		case found && (m == r.written[j] || sameTransition(m, r.written[j])):
			continue // an earned state re-timed is not news (see above)
		case m.group || breakerconfig.Earned(wireState(m.state), m.reason):
			return true
		case found && (m.traffic != r.written[j].traffic || m.candidate.counts != r.written[j].candidate.counts):
			// Taken for the report only when due and material, or with a write
			// that goes anyway (traffic.go): it is waited for already.
			return true
		case !found:
			// A breaker new to the report: the pod's first word on it (Started) can wait,
			// unless it brings a refusal of the config.
			if m.configErr != "" {
				return true
			}
		case m.generation != r.written[j].generation || m.configErr != r.written[j].configErr:
			return true
		}
	}
	return false
}
