package kube

import (
	"math"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/observe"
	"github.com/fusebox-dev/fusebox/pkg/breaker/registry"
)

// member is what the pod says of one breaker, or of one breaker Group. It is comparable,
// so that "has the entry changed" is ==.
type member struct {
	state  breaker.State
	since  time.Time // UTC, cut to the millisecond: what the report keeps
	reason string
	// calls, failures and slow at the transition into state; calls 0 leaves the rates out.
	calls, failures, slow int64
	// slowJudged: the policy judges slow calls, so the slow-call rate is written.
	slowJudged bool
	trigger    string // breakerconfig.Trigger*, for a circuit its calls opened
	// The open period entered (or, half-open, the one just ended); 0 when closed.
	consecutiveOpens int32
	openTimeout      time.Duration
	generation       int64
	configErr        string
	// For a Group: its summary. worst holds the first nWorst keys.
	group                bool
	keys, open, halfOpen int32
	nWorst               int
	worst                [breakerconfig.MaxWorstKeys]string
	// traffic is the window's traffic as last taken for the report (traffic.go).
	traffic traffic
	// candidate is the candidate's state, and its counts as last taken (candidate.go).
	candidate shadow
	// period is the Transition.Period that set state, since and reason (not written):
	// the same period with another since is a re-timing, not a transition (earned.go).
	period uint64
}

// entry is what the reporter knows about one breaker of this pod.
type entry struct {
	// period is the last Transition.Period applied; deliveries from different goroutines
	// may arrive out of order, and an older one must not overwrite a newer state.
	period uint64
	known  bool // want.state, want.since and want.reason are set
	// reported: the breaker is published and the first config sync is done, so it is in
	// the report. Until then transitions are only recorded.
	reported bool
	want     member
	// group is the breaker Group the entry reports, nil for a breaker. A Group's entry is
	// computed from its summary when the report is written, not from transitions.
	group *registry.Group
	// groupForced: the Group's policy holds it ForcedOpen, so that a member created open
	// was forced, not started so.
	groupForced bool
	// breaker is the breaker whose traffic the report carries (a retry budget or
	// throttling is configured), nil when it carries none; window is its policy's, and
	// latest its traffic as last sampled (traffic.go).
	breaker *breaker.Breaker
	window  time.Duration
	latest  traffic
	sampled sampled // the parts of the window the entry carries
	// candidate is the breaker, when its config has a candidate policy; candidateWindow
	// is the candidate's window, and latestCandidate what it did as last sampled
	// (candidate.go).
	candidate       *breaker.Breaker
	candidateWindow time.Duration
	latestCandidate shadow
}

// entry returns the entry of name, creating it. Caller holds mu.
func (r *reporter) entry(name string) *entry {
	e, ok := r.entries[name]
	if !ok {
		e = &entry{}
		r.entries[name] = e
	}
	return e
}

// OnTransition records the breaker's new state as the entry to write. It never blocks. A
// transition of a Group's member ("<group>/<key>") only wakes the writer, which reads the
// Group's summary: the report carries one entry per Group, not one per key.
func (r *reporter) OnTransition(t observe.Transition) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if group, _, ok := registry.SplitKeyName(t.Breaker); ok {
		if e, ok := r.entries[group]; ok && e.group != nil && e.reported {
			r.signal()
		}
		return
	}
	e := r.entry(t.Breaker)
	if t.Period <= e.period {
		return // an older delivery that lost the race to a newer one
	}
	e.period = t.Period
	e.known = true
	e.want.setTransition(t)
	e.want.period = t.Period
	if e.reported {
		r.signal()
	}
}

// setTransition makes m say what t says: the state reached, when and why, and the figures
// behind it.
func (m *member) setTransition(t observe.Transition) {
	m.state = t.To
	m.since = wireTime(t.At)
	m.reason = reasonOf(t)
	m.calls, m.failures, m.slow = t.Counts.Calls, t.Counts.Failures, t.Counts.Slow
	if t.Reason == breakerconfig.ReasonAdopted {
		// An adopted verdict was reached on another pod's evidence: this pod's own window
		// says nothing about it, and a rate next to the state would read as the reason.
		m.calls, m.failures, m.slow = 0, 0, 0
	}
	m.trigger = triggerOf(t)
	m.consecutiveOpens, m.openTimeout = 0, 0
	if t.To != breaker.Closed {
		m.consecutiveOpens, m.openTimeout = int32(min(t.ConsecutiveOpens, math.MaxInt32)), t.OpenTimeout
	}
}

// triggerOf says which judgement of calls opened the circuit, for a circuit its calls
// opened (reasons Tripped and ProbeFailed), else "": a trigger the report knows, not one a
// newer breaker package may add.
func triggerOf(t observe.Transition) string {
	if t.Reason != breakerconfig.ReasonTripped && t.Reason != breakerconfig.ReasonProbeFailed {
		return ""
	}
	switch t.Trigger {
	case breakerconfig.TriggerFailureRate, breakerconfig.TriggerSlowCallRate, breakerconfig.TriggerFailedProbe, breakerconfig.TriggerSlowProbe:
		return t.Trigger
	}
	return ""
}

// reasonOf says how a transition reached its state, as the report spells it: the
// transition's own word, which is the report's. Only the pod's own judgement is an earned
// reason (docs/design.md §5.12): the calls that opened it, Trip, a failed probe, probes that
// closed it.
func reasonOf(t observe.Transition) string {
	switch t.Reason {
	case breakerconfig.ReasonTripped, breakerconfig.ReasonManual, breakerconfig.ReasonProbeFailed,
		breakerconfig.ReasonProbesSucceeded, breakerconfig.ReasonTimedOut, breakerconfig.ReasonAdopted,
		breakerconfig.ReasonForced:
		return t.Reason
	}
	// A reason a newer breaker package may add is not evidence until it is named above.
	return breakerconfig.ReasonTimedOut
}

// configure puts b in the report with the given config generation and refusal, and makes
// sure its entry has a state: a breaker that never moved has had no transition to report
// one. With s the entry also carries b's window traffic and its concurrency figures
// (traffic.go, inflight.go). It does not wake the writer: the applier configures every breaker a config names,
// then calls flush once, so that one config is one write however many breakers it names.
// It must be called without r.mu held, and without any lock OnTransition's callers might
// hold.
func (r *reporter) configure(b *breaker.Breaker, generation int64, configErr string, s sampled) {
	r.mu.Lock()
	e := r.entry(b.Name())
	e.reported = true
	e.want.generation = generation
	e.want.configErr = truncate(configErr, maxConfigError)
	period := e.period
	r.mu.Unlock()

	// Verdict, outside the lock since it may deliver a transition (open → half-open) to
	// OnTransition. It also catches the one change of "since" that comes with no
	// transition: Adopt of an Open verdict on a circuit already open moves its start.
	v := b.Verdict()
	p := b.Policy()
	forced := p.Mode == breaker.ModeForcedOpen

	r.mu.Lock()
	defer r.mu.Unlock()
	e.want.slowJudged = p.SlowCallDuration > 0
	e.breaker, e.window, e.sampled = nil, 0, s
	if s.any() {
		e.breaker, e.window = b, p.Window
	}
	e.want.traffic, e.latest = e.want.traffic.only(s), e.latest.only(s)
	// A transition delivered meanwhile is newer than v; and a state that differs from v
	// with no delivery yet is a transition still on its way, which will bring its own.
	if e.period == period && (!e.known || e.want.state == v.State) {
		if !e.known {
			e.want.calls, e.want.failures, e.want.slow, e.want.trigger = 0, 0, 0, ""
			e.want.reason = breakerconfig.ReasonStarted
			if forced {
				e.want.reason = breakerconfig.ReasonForced
			}
		}
		// The open period too: an adopted Open verdict may re-time the one running.
		// Half-open, Verdict leaves OpenTimeout out, which the transition carried.
		if !e.known || v.State == breaker.Open {
			e.want.consecutiveOpens, e.want.openTimeout = int32(min(v.ConsecutiveOpens, math.MaxInt32)), v.OpenTimeout
		}
		e.known = true
		e.want.state = v.State
		e.want.since = wireTime(v.Since)
	}
}

// unconfigure takes name out of the report (its CircuitBreaker is gone from the
// ConfigMap). If it comes back, its entry is written afresh. Like configure, it leaves
// waking the writer to flush.
func (r *reporter) unconfigure(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.entries[name]; ok {
		e.reported = false
	}
}
