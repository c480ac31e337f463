package controller

import (
	"cmp"
	"slices"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// status.revisions (docs/design.md §10): a breaker's members added up per revision of
// their workload, for a rollout gate to compare a new revision with its baseline.
//
//   - A member's revision is its Pod's, read from the operator's pod cache
//     (resiliencev1alpha1.RevisionOf of its labels) when the pod's reports are derived,
//     never from what a report says: a pod cannot pass its failures off as another
//     revision's. Pods with no revision label are left out.
//   - Each revision's verdict is the fleet rule (decideFleet) applied to its own pods:
//     Open once its earned Opens reach fleetQuorumPercent of its pods, whatever the
//     breaker's scope, so an Open a baseline pod adopted from the fleet's verdict, or was
//     forced into, is not the baseline's own. open counts those earned Opens.
//   - calls and failureRatePercent are one pod, one share (§5.17): with traffic reported,
//     the revision's windows summed as status.traffic sums the fleet's (each pod at most
//     a bounded multiple of the revision's median pod); without, the median of the rates
//     at the pods' last transitions.
//   - At most MaxRevisionsListed, most pods first, then by name.

// aggregateRevisions adds cb's members up per revision.
func aggregateRevisions(cb *resiliencev1alpha1.CircuitBreaker, members []member) []resiliencev1alpha1.RevisionStatus {
	byRevision := map[string][]member{}
	for _, m := range members {
		if m.revision != "" {
			byRevision[m.revision] = append(byRevision[m.revision], m)
		}
	}
	if len(byRevision) == 0 {
		return nil
	}
	names := make([]string, 0, len(byRevision))
	for name := range byRevision {
		names = append(names, name)
	}
	// Only the listed revisions are aggregated: a fleet mid-rollout has two or three,
	// but a workload whose revisions never finish rolling out must not cost a pass each.
	slices.SortFunc(names, func(a, b string) int {
		return cmp.Or(cmp.Compare(len(byRevision[b]), len(byRevision[a])), cmp.Compare(a, b))
	})
	names = names[:min(len(names), resiliencev1alpha1.MaxRevisionsListed)]
	out := make([]resiliencev1alpha1.RevisionStatus, 0, len(names))
	for _, name := range names {
		out = append(out, revisionOf(cb, name, byRevision[name]))
	}
	return out
}

// revisionOf is what the members of one revision add up to.
func revisionOf(cb *resiliencev1alpha1.CircuitBreaker, name string, members []member) resiliencev1alpha1.RevisionStatus {
	d := decideFleet(cb, members)
	r := resiliencev1alpha1.RevisionStatus{
		Revision: name,
		Pods:     saturated(int64(len(members))),
		State:    resiliencev1alpha1.StateClosed,
		Open:     saturated(int64(len(d.openers))),
	}
	switch {
	case d.open:
		r.State = resiliencev1alpha1.StateOpen
	case slices.ContainsFunc(members, func(m member) bool { return m.entry.State != resiliencev1alpha1.StateClosed }):
		r.State = resiliencev1alpha1.StateHalfOpen
	}
	if usesTraffic(cb) {
		t := trafficOf(cb, members)
		r.Calls = &t.requests
		// Of the calls that ran (throttled ones did not), those that did not succeed.
		if ran := t.requests - t.throttled; ran > 0 {
			r.FailureRatePercent = percentOf(max(0, ran-t.accepts), ran)
		}
		return r
	}
	r.FailureRatePercent = medianRate(members)
	return r
}

// medianRate is the lower median of the failure rates the members' windows held at their
// last transitions, nil when none carries one: fewer than half of the pods cannot take it
// outside the range the others' rates span.
func medianRate(members []member) *int32 {
	var rates []int32
	for _, m := range members {
		if p := m.entry.FailureRatePercent; p != nil {
			rates = append(rates, min(max(*p, 0), 100))
		}
	}
	if len(rates) == 0 {
		return nil
	}
	m := nth(rates, (len(rates)-1)/2, cmp.Compare[int32])
	return &m
}

// percentOf is n in percent of of, rounded, within [0, 100]; of > 0 and 0 ≤ n ≤ of.
func percentOf(n, of int64) *int32 {
	// In float64: n × 100 can pass int64 at the counts' bound.
	p := int32(min(100, max(0, float64(n)*100/float64(of)+0.5)))
	return &p
}

// revisionsMoved reports whether a revision's verdict or its earned Opens differ between
// two status.revisions: news for a rollout gate, written as soon as any change of state
// (minWriteInterval), not with the counts (minCountsInterval).
func revisionsMoved(was, now []resiliencev1alpha1.RevisionStatus) bool {
	if len(was) != len(now) {
		return true
	}
	for i := range now {
		if was[i].Revision != now[i].Revision || was[i].State != now[i].State || was[i].Open != now[i].Open {
			return true
		}
	}
	return false
}
