package counting

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// View is what the entries of a breaker's running pods add up to: its status but for what
// the status writer adds (conditions, the candidate's since, observedGeneration).
type View struct {
	State  resiliencev1alpha1.State // empty when no pod reports
	Counts *resiliencev1alpha1.MemberCounts
	// Members are the most relevant pods the entries name, at most MaxMembersListed, for
	// status.members.
	Members []resiliencev1alpha1.MemberStatus
	// Rejected lists every carrier whose pods refused the published config, as "pod:
	// reason" or "node N, K pods: reason".
	Rejected []string
	// Fleet is the fleet's decision, for scope Fleet.
	Fleet *FleetDecision
	// Forced: a Fleet breaker is open because its mode holds it open, not by a verdict.
	Forced bool
	// ConsecutiveOpens and OpenTimeout are the open period (docs/design.md §5.13): the
	// fleet verdict's for scope Fleet, the longest any pod reports for scope Pod.
	ConsecutiveOpens int32
	OpenTimeout      *metav1.Duration
	// Keys adds up the pods' breaker Groups; nil when no pod reports a Group.
	Keys *resiliencev1alpha1.KeySummary
	// Traffic is status.traffic: set for a breaker with a retry budget or throttling.
	Traffic *resiliencev1alpha1.FleetTraffic
	// Concurrency is status.concurrency: set for a breaker with spec.concurrency.
	Concurrency *resiliencev1alpha1.FleetConcurrency
	// Candidate is status.candidate but its since: set for a breaker with a candidate.
	Candidate *resiliencev1alpha1.CandidateStatus
	// Revisions is status.revisions.
	Revisions []resiliencev1alpha1.RevisionStatus
	// OddShape names the carriers left out for reporting the breaker in the other shape
	// (breaker Group or plain) than the rest (OddShapes).
	OddShape []string

	// opener is the open pod whose Open is the most recent one, for Pod scope.
	opener *Member
}

// Aggregate adds up the entries of cb, which OddShapes has already split. With scope Pod
// the state is the most severe pod state. With scope Fleet it is Open while the fleet is
// open; otherwise HalfOpen while some pod is not closed (probing, or open below the
// quorum), else Closed.
func Aggregate(cb *resiliencev1alpha1.CircuitBreaker, entries []Entry) View {
	var v View
	if UsesTraffic(cb) {
		v.Traffic = StatusTraffic(TrafficOf(cb, entries))
	}
	if UsesConcurrency(cb) {
		v.Concurrency = StatusConcurrency(ConcurrencyOf(cb, entries))
	}
	v.Candidate = aggregateCandidate(cb, entries)
	var pods, open, halfOpen, closed, latest int64
	var longest time.Duration
	for i := range entries {
		e := &entries[i]
		if e.Pods <= 0 {
			continue
		}
		pods += e.Pods
		open += e.Open
		halfOpen += e.HalfOpen
		closed += e.Closed
		if e.ConfigGeneration == cb.Generation {
			latest += e.OnLatestConfig
		}
		if e.ConfigErrors > 0 {
			v.Rejected = append(v.Rejected, rejection(e))
		}
		v.ConsecutiveOpens = min(max(v.ConsecutiveOpens, e.ConsecutiveOpens), MaxCountedOpens)
		longest = max(longest, e.OpenTimeout)
		for k := range e.Notable {
			m := &e.Notable[k]
			if m.Circuit.State == resiliencev1alpha1.StateOpen && (v.opener == nil || openedLater(m, v.opener)) {
				v.opener = m
			}
		}
	}
	if pods == 0 {
		return v
	}
	v.Counts = &resiliencev1alpha1.MemberCounts{
		Reporting: saturated(pods), Open: saturated(open), HalfOpen: saturated(halfOpen),
		Closed: saturated(closed), OnLatestConfig: saturated(latest),
	}
	state := resiliencev1alpha1.StateClosed
	switch {
	case open > 0:
		state = resiliencev1alpha1.StateOpen
	case halfOpen > 0:
		state = resiliencev1alpha1.StateHalfOpen
	}
	// Shown, not obeyed, with scope Pod; still no longer than the spec's longest period.
	if longest > 0 {
		_, most := SpecOpenPeriod(cb, math.MaxInt32)
		v.OpenTimeout = &metav1.Duration{Duration: min(longest, most)}
	}
	slices.Sort(v.Rejected)
	v.Keys = aggregateKeys(entries)
	v.Revisions = aggregateRevisions(cb, entries)
	// A breaker Group shares nothing across the fleet: its state is its pods', as with
	// scope Pod.
	if cb.Spec.Scope == resiliencev1alpha1.ScopeFleet && v.Keys == nil {
		d := DecideFleet(cb, entries)
		v.Fleet = &d
		v.ConsecutiveOpens, v.OpenTimeout = 0, nil
		if d.Open {
			v.ConsecutiveOpens = int32(d.Verdict.ConsecutiveOpens)
			if d.Verdict.OpenTimeout > 0 {
				v.OpenTimeout = &metav1.Duration{Duration: time.Duration(d.Verdict.OpenTimeout)}
			}
		}
		switch {
		case d.Open:
			state = resiliencev1alpha1.StateOpen
		case state == resiliencev1alpha1.StateOpen && cb.Spec.Mode == resiliencev1alpha1.ModeForcedOpen:
			// Held open by its mode, which moves no verdict but is open all the same.
			v.Forced = true
		case state == resiliencev1alpha1.StateOpen:
			state = resiliencev1alpha1.StateHalfOpen
		}
	}
	v.State = state
	v.Members = listed(cb, entries)
	return v
}

// rejection says which pods of a carrier refused the published config, and why.
func rejection(e *Entry) string {
	reason := Text(e.ConfigError, MaxConfigErrorText)
	if e.Node == "" {
		return Text(e.Pod, MaxNameText) + ": " + reason
	}
	return fmt.Sprintf("node %s, %d pods: %s", Text(e.Node, MaxNameText), e.ConfigErrors, reason)
}

// openedLater orders open pods for naming the one that opened a Pod-scope breaker: the most
// recent Open, and among equal times one reached on the pod's own evidence, then the first
// pod by name. The order must be total: entries come in the cache's order, which changes
// between reconciles, and a tie broken by it changed the Open condition's message, so a
// status that nothing changed was written again.
func openedLater(a, b *Member) bool {
	if !a.Since.Equal(b.Since) {
		return a.Since.After(b.Since)
	}
	if aCalls, bCalls := a.Circuit.Calls != nil, b.Circuit.Calls != nil; aCalls != bCalls {
		return aCalls
	}
	return cmp.Or(cmp.Compare(a.Pod, b.Pod), cmp.Compare(a.Node, b.Node)) < 0
}

func onLatestConfig(cb *resiliencev1alpha1.CircuitBreaker, m *Member) bool {
	return m.Circuit.ConfigGeneration == cb.Generation && m.Circuit.ConfigError == ""
}

// relevance ranks a pod for status.members: open, half-open, refusing the latest config,
// behind it, closed.
func relevance(cb *resiliencev1alpha1.CircuitBreaker, m *Member) int {
	switch {
	case m.Circuit.State == resiliencev1alpha1.StateOpen:
		return 0
	case m.Circuit.State == resiliencev1alpha1.StateHalfOpen:
		return 1
	case m.Circuit.ConfigError != "":
		return 2
	case !onLatestConfig(cb, m):
		return 3
	}
	return 4
}

// listed returns the most relevant pods the entries name, as status.members spells them:
// by relevance, then the most recent first, then by pod name, so the list is stable while
// nothing moves. Only the first MaxMembersListed are kept in order as the pods go by, not
// all of them sorted: a fleet of thousands of pods reporting on their own costs one pass.
func listed(cb *resiliencev1alpha1.CircuitBreaker, entries []Entry) []resiliencev1alpha1.MemberStatus {
	const most = resiliencev1alpha1.MaxMembersListed
	order := func(a, b *Member) int {
		return cmp.Or(cmp.Compare(relevance(cb, a), relevance(cb, b)), b.Since.Compare(a.Since), cmp.Compare(a.Pod, b.Pod), cmp.Compare(a.Node, b.Node))
	}
	top := make([]*Member, 0, most+1)
	for i := range entries {
		for k := range entries[i].Notable {
			m := &entries[i].Notable[k]
			if len(top) == most && order(m, top[most-1]) >= 0 {
				continue
			}
			at, _ := slices.BinarySearchFunc(top, m, order)
			top = slices.Insert(top, at, m)[:min(len(top)+1, most)]
		}
	}
	out := make([]resiliencev1alpha1.MemberStatus, 0, len(top))
	for _, m := range top {
		// A copy: the entries share their circuits with the reports in the cache.
		c := *m.Circuit.DeepCopy()
		// Whole seconds, as the API server stores a metav1.Time: a report's milliseconds
		// kept here would make every stored status differ from the one computed again,
		// and every reconcile patch it.
		c.Since = metav1.NewTime(c.Since.Time).Rfc3339Copy()
		c.ConfigError = Text(c.ConfigError, MaxConfigErrorText)
		out = append(out, resiliencev1alpha1.MemberStatus{
			Pod:        Text(m.Pod, MaxNameText),
			Node:       Text(m.Node, MaxNameText),
			PodCircuit: c,
			Reason:     m.Reason,
			Keys:       m.Keys,
		})
	}
	return out
}

// OddShapes splits a breaker's entries by the shape of what they report: a breaker Group's
// (keys) or a plain breaker's. One breaker has one shape in every pod that runs the same
// code, and the shape decides how its status adds up (a Group shares no fleet verdict), so
// no carrier may switch it by writing the other shape: the shape most pods report is
// kept, plain on a tie (the shape the spec's scope describes), and the carriers of the
// other are returned by name, sorted, to be left out and named.
func OddShapes(entries []Entry) (kept []Entry, odd []string) {
	var groups, all int64
	for i := range entries {
		all += entries[i].Pods
		if entries[i].Keys != nil {
			groups += entries[i].Pods
		}
	}
	mixed := false
	for i := range entries {
		mixed = mixed || (entries[i].Keys != nil) != (entries[0].Keys != nil)
	}
	if !mixed {
		return entries, nil
	}
	keepGroups := groups > all-groups
	kept = make([]Entry, 0, len(entries))
	for _, e := range entries {
		if (e.Keys != nil) == keepGroups {
			kept = append(kept, e)
		} else {
			odd = append(odd, e.source())
		}
	}
	slices.Sort(odd)
	return kept, odd
}
