package counting

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// status.candidate (docs/design.md §11) adds up what the pods' shadow judgements of
// spec.candidate report. One pod, one share (§5.17): nothing in it is a figure carriers
// of fewer than half of the pods can take outside what the other pods report.
//
//   - pods counts the running pods that judge the candidate of the current generation,
//     each once: a pod behind, or refusing the latest config, may judge an older one.
//   - state is the one at least half of those pods hold, or a worse one (with scope
//     Fleet, at least the spec's quorum as well): fewer than half cannot make it.
//   - opens, wouldRefuse and the enforced side's opens and refused are sums, each pod's
//     count at most maxShareOfMedian times the upper median pod's (or times a floor, if
//     more), as status.traffic's are, and each sum at most MaxCandidateCount.
//   - timeOpen (each side's) and startTime are the median pod's, each carrier's pods
//     taken as its median pod.

// judging returns the candidate figures of cb's entries that count: those of entries that
// run the configuration of cb's generation. A breaker Group's entry carries none (its
// keys' breakers judge no candidate).
func judging(cb *resiliencev1alpha1.CircuitBreaker, entries []Entry) []*Candidate {
	var out []*Candidate
	for i := range entries {
		e := &entries[i]
		if c := e.Candidate; c != nil && c.Pods > 0 && e.Keys == nil && e.ConfigGeneration == cb.Generation && e.OnLatestConfig > 0 {
			out = append(out, c)
		}
	}
	return out
}

// aggregateCandidate is status.candidate for cb's entries, by the rules above, its since
// left to the status writer (it is when the operator saw the state change). nil while cb
// has no candidate.
func aggregateCandidate(cb *resiliencev1alpha1.CircuitBreaker, entries []Entry) *resiliencev1alpha1.CandidateStatus {
	if cb.Spec.Candidate == nil {
		return nil
	}
	js := judging(cb, entries)
	var pods, open, halfOpen int64
	for _, j := range js {
		pods += j.Pods
		open += j.Open
		halfOpen += j.HalfOpen
	}
	st := &resiliencev1alpha1.CandidateStatus{Pods: saturated(pods)}
	if pods == 0 {
		return st
	}
	st.Open, st.HalfOpen = saturated(open), saturated(halfOpen)
	st.State = candidateState(cb, pods, open, halfOpen)

	candidateFloor := int64(ptr.Deref(candidateMinimumThroughput(cb), resiliencev1alpha1.DefaultMinimumThroughput))
	enforcedFloor := int64(ptr.Deref(cb.Spec.MinimumThroughput, resiliencev1alpha1.DefaultMinimumThroughput))
	sum := func(of func(*Candidate) int64, floor int64) int64 {
		items := make([]weighted[int64], len(js))
		for i, j := range js {
			items[i] = weighted[int64]{of(j), j.Pods}
		}
		return boundedSum(items, floor, resiliencev1alpha1.MaxCandidateCount)
	}
	st.Opens = sum(func(j *Candidate) int64 { return j.Opens }, 1)
	st.WouldRefuse = sum(func(j *Candidate) int64 { return j.WouldRefuse }, candidateFloor)
	st.Enforced = &resiliencev1alpha1.CandidateBaseline{
		Opens:   sum(func(j *Candidate) int64 { return j.EnforcedOpens }, 1),
		Refused: sum(func(j *Candidate) int64 { return j.Refused }, enforcedFloor),
	}
	st.TimeOpen = &metav1.Duration{Duration: medianDuration(js, func(j *Candidate) time.Duration { return j.TimeOpen })}
	st.Enforced.TimeOpen = &metav1.Duration{Duration: medianDuration(js, func(j *Candidate) time.Duration { return j.EnforcedTimeOpen })}
	var starts []weighted[time.Time]
	for _, j := range js {
		if !j.StartTime.IsZero() {
			starts = append(starts, weighted[time.Time]{j.StartTime, j.Pods})
		}
	}
	if len(starts) > 0 {
		// Whole seconds, as the API server stores a metav1.Time: a report's milliseconds
		// kept here would make every stored status differ from the one computed again.
		start := metav1.NewTime(upperMedian(starts, func(a, b time.Time) int { return a.Compare(b) })).Rfc3339Copy()
		st.StartTime = &start
	}
	return st
}

// candidateMinimumThroughput is the minimumThroughput the candidate judges by: its own,
// else the spec's.
func candidateMinimumThroughput(cb *resiliencev1alpha1.CircuitBreaker) *int32 {
	if c := cb.Spec.Candidate; c != nil && c.MinimumThroughput != nil {
		return c.MinimumThroughput
	}
	return cb.Spec.MinimumThroughput
}

// candidateState is the candidate's state over n judging pods of which open have it open
// and halfOpen half-open: Open when at least half of them have it open, HalfOpen when at
// least half have it open or half-open, else Closed. With scope Fleet the candidate's
// fleet would open only at the spec's quorum, so that many are needed too.
func candidateState(cb *resiliencev1alpha1.CircuitBreaker, n, open, halfOpen int64) resiliencev1alpha1.State {
	need := (n + 1) / 2
	if cb.Spec.Scope == resiliencev1alpha1.ScopeFleet {
		quorum := int64(ptr.Deref(cb.Spec.FleetQuorumPercent, resiliencev1alpha1.DefaultFleetQuorumPercent))
		need = max(need, (quorum*n+99)/100)
	}
	switch {
	case open >= need:
		return resiliencev1alpha1.StateOpen
	case open+halfOpen >= need:
		return resiliencev1alpha1.StateHalfOpen
	}
	return resiliencev1alpha1.StateClosed
}

// medianDuration is the upper median pod's duration, cut to whole milliseconds (what a
// status duration keeps readable).
func medianDuration(js []*Candidate, of func(*Candidate) time.Duration) time.Duration {
	ds := make([]weighted[time.Duration], len(js))
	for i, j := range js {
		ds[i] = weighted[time.Duration]{of(j), j.Pods}
	}
	return upperMedian(ds, func(a, b time.Duration) int { return compareInt64(int64(a), int64(b)) }).Truncate(time.Millisecond)
}
