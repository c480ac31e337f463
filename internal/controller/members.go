package controller

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// breakerView is what the reports of a breaker's running pods add up to.
type breakerView struct {
	state  resiliencev1alpha1.State // empty when no pod reports
	counts *resiliencev1alpha1.MemberCounts
	// listed are the most relevant members, at most MaxMembersListed, for status.members.
	listed []resiliencev1alpha1.MemberStatus
	// rejected lists every member that refused the published config, as "pod: reason".
	rejected []string
	// fleet is the fleet's decision, for scope Fleet.
	fleet *fleetDecision
	// opener is the open member whose Open is the most recent one earned, for Pod scope.
	opener *member
	// forced: a Fleet breaker is open because its mode holds it open, not by a verdict.
	forced bool
	// consecutiveOpens and openTimeout are the open period (docs/design.md §5.13): the fleet
	// verdict's for scope Fleet, the longest any pod reports for scope Pod.
	consecutiveOpens int32
	openTimeout      *metav1.Duration
	// keys adds up the pods' breaker Groups; nil when no pod reports a Group.
	keys *resiliencev1alpha1.KeySummary
	// traffic is status.traffic: set for a breaker with a retry budget or throttling.
	traffic *resiliencev1alpha1.FleetTraffic
	// candidate is status.candidate but its since: set for a breaker with a candidate.
	candidate *resiliencev1alpha1.CandidateStatus
	// revisions is status.revisions (aggregateRevisions).
	revisions []resiliencev1alpha1.RevisionStatus
	// oddShape names the pods left out for reporting the breaker in the other shape
	// (breaker Group or plain) than the rest (oddShapes).
	oddShape []string
}

// severity orders member states for a Pod-scope breaker's overall state: one open pod
// makes the breaker Open.
func severity(s resiliencev1alpha1.State) int {
	switch s {
	case resiliencev1alpha1.StateOpen:
		return 2
	case resiliencev1alpha1.StateHalfOpen:
		return 1
	default:
		return 0
	}
}

// aggregate adds up the members of cb. With scope Pod the state is the most severe member
// state. With scope Fleet it is Open while the fleet is open; otherwise HalfOpen while some
// pod is not closed (probing, or open below the quorum), else Closed.
func aggregate(cb *resiliencev1alpha1.CircuitBreaker, members []member) breakerView {
	var v breakerView
	if usesTraffic(cb) {
		v.traffic = statusTraffic(trafficOf(cb, members))
	}
	v.candidate = aggregateCandidate(cb, members)
	if len(members) == 0 {
		return v
	}
	counts := &resiliencev1alpha1.MemberCounts{Reporting: int32(len(members))}
	state := resiliencev1alpha1.StateClosed
	for i := range members {
		m := &members[i]
		switch m.entry.State {
		case resiliencev1alpha1.StateOpen:
			counts.Open++
			if v.opener == nil || earnedFirst(m, v.opener) {
				v.opener = m
			}
		case resiliencev1alpha1.StateHalfOpen:
			counts.HalfOpen++
		default:
			counts.Closed++
		}
		if onLatestConfig(cb, m) {
			counts.OnLatestConfig++
		}
		if m.entry.ConfigError != "" {
			v.rejected = append(v.rejected, podName(m)+": "+reportText(m.entry.ConfigError, maxConfigErrorText))
		}
		if severity(m.entry.State) > severity(state) {
			state = m.entry.State
		}
		v.consecutiveOpens = min(max(v.consecutiveOpens, m.entry.ConsecutiveOpens), maxCountedOpens)
		if t := m.entry.OpenTimeout; t != nil && (v.openTimeout == nil || t.Duration > v.openTimeout.Duration) {
			v.openTimeout = &metav1.Duration{Duration: t.Duration}
		}
	}
	// Shown, not obeyed, with scope Pod; still no longer than the spec's longest period.
	if v.openTimeout != nil {
		_, longest := specOpenPeriod(cb, math.MaxInt32)
		v.openTimeout.Duration = min(v.openTimeout.Duration, longest)
	}
	slices.Sort(v.rejected)
	v.keys = aggregateKeys(members)
	v.revisions = aggregateRevisions(cb, members)
	// A breaker Group shares nothing across the fleet: its state is its pods', as with
	// scope Pod.
	if cb.Spec.Scope == resiliencev1alpha1.ScopeFleet && v.keys == nil {
		d := decideFleet(cb, members)
		v.fleet = &d
		v.consecutiveOpens, v.openTimeout = 0, nil
		if d.open {
			v.consecutiveOpens = int32(d.verdict.ConsecutiveOpens)
			if d.verdict.OpenTimeout > 0 {
				v.openTimeout = &metav1.Duration{Duration: time.Duration(d.verdict.OpenTimeout)}
			}
		}
		switch {
		case d.open:
			state = resiliencev1alpha1.StateOpen
		case state == resiliencev1alpha1.StateOpen && cb.Spec.Mode == resiliencev1alpha1.ModeForcedOpen:
			// Held open by its mode, which moves no verdict but is open all the same.
			v.forced = true
		case state == resiliencev1alpha1.StateOpen:
			state = resiliencev1alpha1.StateHalfOpen
		}
	}
	v.state, v.counts = state, counts
	v.listed = listed(cb, members)
	return v
}

// saturated is n as an int32 count, the largest one when it does not fit.
func saturated(n int64) int32 {
	return int32(min(n, math.MaxInt32))
}

// earnedFirst orders open members for naming the one that opened a Pod-scope breaker: the
// most recent Open, and among equal times one reached on the pod's own evidence, then the
// first pod by name. The order must be total: members come in the cache's order, which
// changes between reconciles, and a tie broken by it changed the Open condition's message,
// so a status that nothing changed was written again.
func earnedFirst(a, b *member) bool {
	if !a.since.Equal(b.since) {
		return a.since.After(b.since)
	}
	if aCalls, bCalls := a.entry.Calls != nil, b.entry.Calls != nil; aCalls != bCalls {
		return aCalls
	}
	return a.pod < b.pod
}

func onLatestConfig(cb *resiliencev1alpha1.CircuitBreaker, m *member) bool {
	return m.entry.ConfigGeneration == cb.Generation && m.entry.ConfigError == ""
}

// relevance ranks a member for status.members: open, half-open, refusing the latest
// config, behind it, closed.
func relevance(cb *resiliencev1alpha1.CircuitBreaker, m *member) int {
	switch {
	case m.entry.State == resiliencev1alpha1.StateOpen:
		return 0
	case m.entry.State == resiliencev1alpha1.StateHalfOpen:
		return 1
	case m.entry.ConfigError != "":
		return 2
	case !onLatestConfig(cb, m):
		return 3
	}
	return 4
}

// listed returns the most relevant members as status.members spells them: by relevance,
// then the most recent first, then by pod name, so the list is stable while nothing moves.
// Only the first MaxMembersListed are kept in order as the members go by, not all of them
// sorted: a fleet of thousands costs one pass.
func listed(cb *resiliencev1alpha1.CircuitBreaker, members []member) []resiliencev1alpha1.MemberStatus {
	const most = resiliencev1alpha1.MaxMembersListed
	order := func(a, b *member) int {
		return cmp.Or(cmp.Compare(relevance(cb, a), relevance(cb, b)), b.since.Compare(a.since), cmp.Compare(a.pod, b.pod))
	}
	top := make([]*member, 0, most+1)
	for i := range members {
		m := &members[i]
		if len(top) == most && order(m, top[most-1]) >= 0 {
			continue
		}
		at, _ := slices.BinarySearchFunc(top, m, order)
		top = slices.Insert(top, at, m)[:min(len(top)+1, most)]
	}
	out := make([]resiliencev1alpha1.MemberStatus, 0, len(top))
	for _, m := range top {
		// A copy: the reports are the cache's own objects, and the status patch decodes
		// the API server's answer into the pointers of the line.
		c := *m.entry.PodCircuit.DeepCopy()
		// Whole seconds, as the API server stores a metav1.Time: a report's milliseconds
		// kept here would make every stored status differ from the one computed again,
		// and every reconcile patch it.
		c.Since = metav1.NewTime(c.Since.Time).Rfc3339Copy()
		c.ConfigError = reportText(c.ConfigError, maxConfigErrorText)
		out = append(out, resiliencev1alpha1.MemberStatus{
			Pod:        podName(m),
			PodCircuit: c,
			Reason:     m.entry.Reason,
			Keys:       memberKeys(m.entry.Keys),
		})
	}
	return out
}

// podName is a member's pod name as status text: a report's own name is a Kubernetes
// name already, but a node agent carries names the API server did not judge.
func podName(m *member) string {
	return reportText(m.pod, maxNameText)
}

// openedMessage describes who opened the breaker, on what evidence, and for how long when
// the open period is backed off.
func openedMessage(cb *resiliencev1alpha1.CircuitBreaker, v breakerView) string {
	if d := v.fleet; d != nil {
		if v.forced {
			return fmt.Sprintf("Held open by mode %s on %d of %d pods", resiliencev1alpha1.ModeForcedOpen, v.counts.Open, v.counts.Reporting)
		}
		if !d.open {
			return fleetProgress(cb, v)
		}
		openers := d.openers[:d.need]
		pods := make([]string, len(openers))
		for i := range openers {
			pods[i] = podName(&openers[i]) + evidence(cb, openers[i])
		}
		return fmt.Sprintf("The fleet is open since %s: %d of %d pods opened on their own evidence (quorum %s): %s",
			openers[len(openers)-1].since.UTC().Format(time.RFC3339), len(d.openers), v.counts.Reporting,
			quorumText(cb), joinLimited(pods)) + openPeriod(v.consecutiveOpens, v.openTimeout)
	}
	m := v.opener
	if m == nil {
		return "The circuit is open"
	}
	return fmt.Sprintf("Pod %s opened the circuit at %s (%s)%s", podName(m), m.since.UTC().Format(time.RFC3339), m.entry.Reason, evidence(cb, *m)) +
		openPeriod(m.entry.ConsecutiveOpens, m.entry.OpenTimeout)
}

// halfOpenedMessage says why the breaker is half-open, for its CircuitHalfOpened Event.
func halfOpenedMessage(cb *resiliencev1alpha1.CircuitBreaker, v breakerView) string {
	if m := fleetHalfOpen(cb, v); m != "" {
		return m
	}
	return fmt.Sprintf("%d of %d pods are probing whether the dependency is back", v.counts.HalfOpen, v.counts.Reporting)
}

// fleetHalfOpen says why a Fleet breaker that is not open is not closed either, when it is
// not that its pods are probing: pods open on their own evidence that do not make the quorum
// yet, or pods that have not yet followed the probes that closed the fleet. "0 of 10 pods
// are probing", or a quorum count that is met, would mislead in both cases. "" otherwise.
func fleetHalfOpen(cb *resiliencev1alpha1.CircuitBreaker, v breakerView) string {
	d := v.fleet
	switch {
	case d == nil || d.open:
		return ""
	case len(d.openers) > 0 && len(d.openers) < d.need:
		return fleetProgress(cb, v)
	case d.verdict != nil && d.verdict.State == breakerconfig.StateClosed:
		return fmt.Sprintf("A pod's probes closed the fleet at %s; the other pods follow", d.verdict.Since.UTC().Format(time.RFC3339))
	}
	return ""
}

// fleetProgress says how close a Fleet breaker that is not open is to its quorum.
func fleetProgress(cb *resiliencev1alpha1.CircuitBreaker, v breakerView) string {
	return fmt.Sprintf("%d of %d pods open on their own evidence, quorum %s needs %d",
		len(v.fleet.openers), v.counts.Reporting, quorumText(cb), v.fleet.need)
}

// quorumText is spec.fleetQuorumPercent as kubectl fusebox spells it: "1 pod" for 0, the
// one pod that opens the fleet, rather than a "0%" that reads as no pod at all.
func quorumText(cb *resiliencev1alpha1.CircuitBreaker) string {
	q := int32Or(cb.Spec.FleetQuorumPercent, resiliencev1alpha1.DefaultFleetQuorumPercent)
	if q == 0 {
		return "1 pod"
	}
	return fmt.Sprintf("%d%%", q)
}

// evidence says what in the member's calls opened its circuit: the failure rate or the
// slow-call rate of its window with the figures, or the probe that failed or was slow.
func evidence(cb *resiliencev1alpha1.CircuitBreaker, m member) string {
	e := m.entry
	switch e.Trigger {
	case breakerconfig.TriggerSlowCallRate:
		if e.SlowCallRatePercent != nil && e.Calls != nil {
			return fmt.Sprintf(": slow-call rate %d%% of %d calls (%s)", *e.SlowCallRatePercent, *e.Calls, slowCalls(cb))
		}
		return ": slow-call rate (" + slowCalls(cb) + ")"
	case breakerconfig.TriggerFailedProbe:
		return ": a probe failed"
	case breakerconfig.TriggerSlowProbe:
		return ": a probe was slow (" + slowCalls(cb) + ")"
	}
	if e.FailureRatePercent == nil || e.Calls == nil {
		return ""
	}
	return fmt.Sprintf(": %d%% of %d calls failed", *e.FailureRatePercent, *e.Calls)
}

// slowCalls says what a slow call is under cb's current spec.
func slowCalls(cb *resiliencev1alpha1.CircuitBreaker) string {
	if d := cb.Spec.SlowCallDuration; d != nil {
		return "slow: " + d.Duration.String() + " or longer"
	}
	return "slow calls"
}

// openPeriod says how long a backed-off open period lasts (docs/design.md §5.13), and nothing for
// a first open, whose period is openTimeout.
func openPeriod(consecutiveOpens int32, openTimeout *metav1.Duration) string {
	if consecutiveOpens < 2 || openTimeout == nil {
		return ""
	}
	return fmt.Sprintf(". Open for %s, the %s consecutive open", openTimeout.Duration, ordinal(consecutiveOpens))
}

// ordinal spells n as "1st", "2nd", "3rd", "11th", ...
func ordinal(n int32) string {
	suffix := "th"
	switch {
	case n%100 >= 11 && n%100 <= 13:
	case n%10 == 1:
		suffix = "st"
	case n%10 == 2:
		suffix = "nd"
	case n%10 == 3:
		suffix = "rd"
	}
	return fmt.Sprintf("%d%s", n, suffix)
}

// maxListed is how many pods a condition message or Event names before "and N more".
const maxListed = 5

// joinLimited joins items, naming at most maxListed of them.
func joinLimited(items []string) string {
	if len(items) <= maxListed {
		return strings.Join(items, "; ")
	}
	return strings.Join(items[:maxListed], "; ") + fmt.Sprintf("; and %d more", len(items)-maxListed)
}
