package counting

import (
	"cmp"
	"slices"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// status.revisions (docs/design.md §10): a breaker's entries added up per revision of
// their workload, for a rollout gate to compare a new revision with its baseline.
//
//   - An entry's revision is its pods' as the operator's pod cache says: a pod's own
//     report takes its Pod's labels, never what the report says; a node's entry counts
//     for no more pods of its revision than the cache has bound to the node. Entries with
//     no revision are left out.
//   - Each revision's verdict is the fleet rule (DecideFleet) applied to its own entries:
//     Open once its earned Opens reach fleetQuorumPercent of its pods, whatever the
//     breaker's scope, so an Open a baseline pod adopted from the fleet's verdict, or was
//     forced into, is not the baseline's own. open counts those earned Opens.
//   - calls and failureRatePercent are one pod, one share (§5.17): with traffic reported,
//     the revision's windows summed as status.traffic sums the fleet's; without, the
//     median pod's rate at its last transition.
//   - At most MaxRevisionsListed, most pods first, then by name.

// aggregateRevisions adds cb's entries up per revision.
func aggregateRevisions(cb *resiliencev1alpha1.CircuitBreaker, entries []Entry) []resiliencev1alpha1.RevisionStatus {
	pods := map[string]int64{}
	carriers := map[string]int{}
	for i := range entries {
		if e := &entries[i]; e.Revision != "" && e.Pods > 0 {
			pods[e.Revision] += e.Pods
			carriers[e.Revision]++
		}
	}
	if len(pods) == 0 {
		return nil
	}
	names := make([]string, 0, len(pods))
	for name := range pods {
		names = append(names, name)
	}
	// Only the listed revisions are aggregated: a fleet mid-rollout has two or three, but a
	// workload whose revisions never finish rolling out must not cost a pass each.
	slices.SortFunc(names, func(a, b string) int { return cmp.Or(cmp.Compare(pods[b], pods[a]), cmp.Compare(a, b)) })
	names = names[:min(len(names), resiliencev1alpha1.MaxRevisionsListed)]
	out := make([]resiliencev1alpha1.RevisionStatus, 0, len(names))
	// A revision's entries are the whole slice when every entry is of it (a fleet between
	// rollouts), else copied into one buffer that each listed revision reuses: an entry is a
	// few hundred bytes, and growing a slice of each revision's entries one by one was the
	// larger part of an aggregate's time and memory at 5,000 pods.
	var buf []Entry
	for _, name := range names {
		of := entries
		if carriers[name] != len(entries) {
			buf = slices.Grow(buf[:0], carriers[name])
			for i := range entries {
				if entries[i].Revision == name && entries[i].Pods > 0 {
					buf = append(buf, entries[i])
				}
			}
			of = buf
		}
		out = append(out, revisionOf(cb, name, of))
	}
	return out
}

// revisionOf is what the entries of one revision add up to.
func revisionOf(cb *resiliencev1alpha1.CircuitBreaker, name string, entries []Entry) resiliencev1alpha1.RevisionStatus {
	d := DecideFleet(cb, entries)
	var pods, closed int64
	for i := range entries {
		pods += entries[i].Pods
		closed += entries[i].Closed
	}
	r := resiliencev1alpha1.RevisionStatus{
		Revision: name,
		Pods:     saturated(pods),
		State:    resiliencev1alpha1.StateClosed,
		Open:     saturated(d.Earned),
	}
	switch {
	case d.Open:
		r.State = resiliencev1alpha1.StateOpen
	case closed < pods:
		r.State = resiliencev1alpha1.StateHalfOpen
	}
	if UsesTraffic(cb) {
		t := TrafficOf(cb, entries)
		r.Calls = &t.Requests
		// Of the calls that ran (throttled ones did not), those that did not succeed.
		if ran := t.Requests - t.Throttled; ran > 0 {
			r.FailureRatePercent = percentOf(max(0, ran-t.Accepts), ran)
		}
		return r
	}
	r.FailureRatePercent = medianRate(entries)
	return r
}

// medianRate is the lower median pod's failure rate at its last transition, each carrier's
// pods taken at its rate; nil when none carries one: carriers of fewer than half of the
// pods cannot take it outside the range the others' rates span.
func medianRate(entries []Entry) *int32 {
	var rates []weighted[int64]
	for i := range entries {
		if p := entries[i].FailureRate; p != nil && entries[i].Pods > 0 {
			rates = append(rates, weighted[int64]{int64(min(max(*p, 0), 100)), entries[i].Pods})
		}
	}
	if len(rates) == 0 {
		return nil
	}
	m := int32(lowerMedian(rates, compareInt64))
	return &m
}

// RevisionsMoved reports whether a revision's verdict or its earned Opens differ between
// two status.revisions: news for a rollout gate, written as soon as any change of state,
// not with the counts.
func RevisionsMoved(was, now []resiliencev1alpha1.RevisionStatus) bool {
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
