package controller

import (
	"cmp"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// Candidate policies (docs/design.md §11): the operator renders spec.candidate, resolved
// against the spec, into the published document, and adds up what the pods' shadow
// judgements of it report into status.candidate. One pod, one share (§5.17): nothing in
// status.candidate is a figure fewer than half of the pods can take outside what the
// other pods report.
//
//   - pods counts the running pods that judge the candidate of the current generation,
//     each once: a pod behind, or refusing the latest config, may judge an older one.
//   - state is the one at least half of those pods hold, or a worse one (with scope
//     Fleet, at least the spec's quorum as well): fewer than half cannot make it.
//   - opens, wouldRefuse and the enforced side's opens and refused are sums, each pod's
//     count at most maxShareOfMedian times the upper median pod's (or times the floor
//     below, if more), as status.traffic's are, and each sum at most MaxCandidateCount.
//   - timeOpen (each side's) and startTime are the median pod's.

// renderCandidate is spec.candidate as the pods judge it: every policy field resolved,
// the spec's where the candidate sets none and the default where neither does. nil
// without a candidate.
func renderCandidate(s resiliencev1alpha1.CircuitBreakerSpec) *breakerconfig.Candidate {
	if s.Candidate == nil {
		return nil
	}
	cs := s.CandidateSpec()
	openTimeout := durationOr(cs.OpenTimeout, resiliencev1alpha1.DefaultOpenTimeout)
	window := durationOr(cs.Window, resiliencev1alpha1.DefaultWindow)
	c := &breakerconfig.Candidate{
		OpenTimeout:            breakerconfig.Duration(openTimeout),
		Window:                 breakerconfig.Duration(window),
		FailureRatio:           float64(int32Or(cs.FailureRatePercent, resiliencev1alpha1.DefaultFailureRatePercent)) / 100,
		MinimumThroughput:      int(int32Or(cs.MinimumThroughput, resiliencev1alpha1.DefaultMinimumThroughput)),
		SuccessThreshold:       int(int32Or(cs.SuccessThreshold, resiliencev1alpha1.DefaultSuccessThreshold)),
		HalfOpenPermittedCalls: int(int32Or(cs.HalfOpenPermittedCalls, resiliencev1alpha1.DefaultHalfOpenPermittedCalls)),
	}
	if cs.SlowCallDuration != nil {
		c.SlowCallDuration = breakerconfig.Duration(cs.SlowCallDuration.Duration)
		c.SlowCallRatio = float64(int32Or(cs.SlowCallRatePercent, resiliencev1alpha1.DefaultSlowCallRatePercent)) / 100
	}
	if cs.MaxOpenTimeout != nil {
		c.MaxOpenTimeout = breakerconfig.Duration(cs.MaxOpenTimeout.Duration)
	}
	return c
}

// judgement is one pod's report of its candidate, as the operator counts it: each count
// within [0, MaxCandidateCount] (the schema's bound, again for a report stored before
// it), a duration left out or negative counted as 0.
type judgement struct {
	state                      resiliencev1alpha1.State
	opens, wouldRefuse         int64
	enforcedOpens, refused     int64
	timeOpen, enforcedTimeOpen time.Duration
	startTime                  time.Time // zero when the pod did not say
}

func judgementOf(c *resiliencev1alpha1.CandidateReport) judgement {
	count := func(n int64) int64 { return min(max(n, 0), resiliencev1alpha1.MaxCandidateCount) }
	span := func(d *metav1.Duration) time.Duration {
		if d == nil {
			return 0
		}
		return max(d.Duration, 0)
	}
	j := judgement{state: c.State, opens: count(c.Opens), wouldRefuse: count(c.WouldRefuse), timeOpen: span(c.TimeOpen)}
	if b := c.Enforced; b != nil {
		j.enforcedOpens, j.refused, j.enforcedTimeOpen = count(b.Opens), count(b.Refused), span(b.TimeOpen)
	}
	if c.StartTime != nil {
		j.startTime = c.StartTime.Time
	}
	return j
}

// judges returns the judgements of cb's candidate that count: the members' that run the
// configuration of cb's generation and report a candidate. A breaker Group's entry
// carries none (its keys' breakers judge no candidate).
func judges(cb *resiliencev1alpha1.CircuitBreaker, members []member) []judgement {
	var out []judgement
	for i := range members {
		m := &members[i]
		if m.entry.Candidate == nil || m.entry.Keys != nil || !onLatestConfig(cb, m) {
			continue
		}
		if out == nil {
			out = make([]judgement, 0, len(members))
		}
		out = append(out, judgementOf(m.entry.Candidate))
	}
	return out
}

// aggregateCandidate is status.candidate for cb's members, by the rules above, its since
// left to the status writer (it is when the operator saw the state change). nil while cb
// has no candidate.
func aggregateCandidate(cb *resiliencev1alpha1.CircuitBreaker, members []member) *resiliencev1alpha1.CandidateStatus {
	if cb.Spec.Candidate == nil {
		return nil
	}
	js := judges(cb, members)
	st := &resiliencev1alpha1.CandidateStatus{Pods: saturated(int64(len(js)))}
	if len(js) == 0 {
		return st
	}
	for _, j := range js {
		switch j.state {
		case resiliencev1alpha1.StateOpen:
			st.Open++
		case resiliencev1alpha1.StateHalfOpen:
			st.HalfOpen++
		}
	}
	st.State = candidateState(cb, len(js), int(st.Open), int(st.HalfOpen))

	candidateFloor := int64(int32Or(cb.Spec.CandidateSpec().MinimumThroughput, resiliencev1alpha1.DefaultMinimumThroughput))
	enforcedFloor := int64(int32Or(cb.Spec.MinimumThroughput, resiliencev1alpha1.DefaultMinimumThroughput))
	st.Opens = boundedSum(js, func(j judgement) int64 { return j.opens }, 1)
	st.WouldRefuse = boundedSum(js, func(j judgement) int64 { return j.wouldRefuse }, candidateFloor)
	st.Enforced = &resiliencev1alpha1.CandidateBaseline{
		Opens:   boundedSum(js, func(j judgement) int64 { return j.enforcedOpens }, 1),
		Refused: boundedSum(js, func(j judgement) int64 { return j.refused }, enforcedFloor),
	}
	st.TimeOpen = &metav1.Duration{Duration: median(js, func(j judgement) time.Duration { return j.timeOpen })}
	st.Enforced.TimeOpen = &metav1.Duration{Duration: median(js, func(j judgement) time.Duration { return j.enforcedTimeOpen })}
	var starts []time.Time
	for _, j := range js {
		if !j.startTime.IsZero() {
			starts = append(starts, j.startTime)
		}
	}
	if len(starts) > 0 {
		// Whole seconds, as the API server stores a metav1.Time: a report's milliseconds
		// kept here would make every stored status differ from the one computed again.
		start := metav1.NewTime(nth(starts, len(starts)/2, func(a, b time.Time) int { return a.Compare(b) })).Rfc3339Copy()
		st.StartTime = &start
	}
	return st
}

// candidateState is the candidate's state over n judging pods of which open have it open
// and halfOpen half-open: Open when at least half of them have it open, HalfOpen when at
// least half have it open or half-open, else Closed. With scope Fleet the candidate's
// fleet would open only at the spec's quorum, so that many are needed too.
func candidateState(cb *resiliencev1alpha1.CircuitBreaker, n, open, halfOpen int) resiliencev1alpha1.State {
	need := (n + 1) / 2
	if cb.Spec.Scope == resiliencev1alpha1.ScopeFleet {
		quorum := int(int32Or(cb.Spec.FleetQuorumPercent, resiliencev1alpha1.DefaultFleetQuorumPercent))
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

// boundedSum adds up one count of the judgements, each counting for at most
// maxShareOfMedian times the upper median judgement's (or times floor, if more): one pod
// counts for at most a few typical pods. The sum is at most MaxCandidateCount.
func boundedSum(js []judgement, count func(judgement) int64, floor int64) int64 {
	counts := make([]int64, len(js))
	for i, j := range js {
		counts[i] = count(j)
	}
	bound := maxShareOfMedian * max(nth(counts, len(counts)/2, cmp.Compare[int64]), floor)
	var sum int64
	for _, n := range counts {
		sum = min(sum+min(n, bound), resiliencev1alpha1.MaxCandidateCount)
	}
	return sum
}

// median is the upper median of one duration of the judgements, cut to whole
// milliseconds (what a status duration keeps readable).
func median(js []judgement, of func(judgement) time.Duration) time.Duration {
	ds := make([]time.Duration, len(js))
	for i, j := range js {
		ds[i] = of(j)
	}
	return nth(ds, len(ds)/2, cmp.Compare[time.Duration]).Truncate(time.Millisecond)
}
