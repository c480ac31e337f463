package controller

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

func withCandidate(gen int64, c resiliencev1alpha1.CandidatePolicy) *resiliencev1alpha1.CircuitBreaker {
	return &resiliencev1alpha1.CircuitBreaker{
		ObjectMeta: metav1.ObjectMeta{Name: "payments-api", Generation: gen},
		Spec: resiliencev1alpha1.CircuitBreakerSpec{
			OpenTimeout: &metav1.Duration{Duration: time.Minute}, FailureRatePercent: ptr.To[int32](50),
			Candidate: &c,
		},
	}
}

func judging(pod string, gen int64, state resiliencev1alpha1.State, opens, wouldRefuse int64) member {
	start := metav1.NewTime(time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC))
	return member{pod: pod, entry: resiliencev1alpha1.BreakerReportEntry{
		Name: "payments-api", PodCircuit: resiliencev1alpha1.PodCircuit{State: resiliencev1alpha1.StateClosed, ConfigGeneration: gen},
		Candidate: &resiliencev1alpha1.CandidateReport{
			State: state, Opens: opens, WouldRefuse: wouldRefuse, StartTime: &start,
			TimeOpen: &metav1.Duration{Duration: time.Duration(opens) * 10 * time.Second},
			Enforced: &resiliencev1alpha1.CandidateBaseline{Opens: 0, Refused: 0, TimeOpen: &metav1.Duration{}},
		},
	}}
}

// The candidate is rendered resolved: the spec's fields where it sets none, the defaults
// where neither does.
func TestRenderCandidateResolvesAgainstTheSpec(t *testing.T) {
	cb := withCandidate(1, resiliencev1alpha1.CandidatePolicy{FailureRatePercent: ptr.To[int32](10), SlowCallDuration: &metav1.Duration{Duration: 2 * time.Second}})
	c, err := render(cb, nil, fleetTraffic{})
	if err != nil {
		t.Fatal(err)
	}
	want := breakerconfig.Candidate{OpenTimeout: breakerconfig.Duration(time.Minute), Window: breakerconfig.Duration(10 * time.Second),
		FailureRatio: 0.1, MinimumThroughput: 20, SuccessThreshold: 2, HalfOpenPermittedCalls: 1,
		SlowCallDuration: breakerconfig.Duration(2 * time.Second), SlowCallRatio: 1}
	if c.Candidate == nil || *c.Candidate != want {
		t.Errorf("rendered candidate %+v, want %+v", c.Candidate, want)
	}
	cb.Spec.Candidate = nil
	if c, err := render(cb, nil, fleetTraffic{}); err != nil || c.Candidate != nil {
		t.Errorf("without a candidate: %+v, %v", c.Candidate, err)
	}
}

// Ten pods judge the candidate; the ones that count are those on the current generation.
// The state is the one at least half hold; opens and wouldRefuse sum, a rogue pod's for at
// most four times the upper median pod's.
func TestAggregateCandidate(t *testing.T) {
	cb := withCandidate(3, resiliencev1alpha1.CandidatePolicy{FailureRatePercent: ptr.To[int32](10)})
	var fleet []member
	for i := range 10 {
		fleet = append(fleet, judging(string(rune('a'+i)), 3, resiliencev1alpha1.StateOpen, 2, 100))
	}
	got := aggregateCandidate(cb, fleet)
	if got.Pods != 10 || got.State != resiliencev1alpha1.StateOpen || got.Open != 10 || got.Opens != 20 || got.WouldRefuse != 1000 ||
		got.TimeOpen.Duration != 20*time.Second || got.Enforced == nil || got.Enforced.Refused != 0 || got.StartTime == nil {
		t.Errorf("ten open pods: %+v", got)
	}

	// Four of ten open: not enough for Open; a rogue reports the bound.
	for i := range fleet {
		fleet[i].entry.Candidate.State = resiliencev1alpha1.StateClosed
		if i < 4 {
			fleet[i].entry.Candidate.State = resiliencev1alpha1.StateOpen
		}
	}
	fleet[0].entry.Candidate.WouldRefuse = resiliencev1alpha1.MaxCandidateCount
	got = aggregateCandidate(cb, fleet)
	if got.State != resiliencev1alpha1.StateClosed || got.Open != 4 || got.WouldRefuse != 9*100+4*100 {
		t.Errorf("four of ten open, one rogue: %+v", got)
	}
	fleet[4].entry.Candidate.State = resiliencev1alpha1.StateHalfOpen
	if got := aggregateCandidate(cb, fleet); got.State != resiliencev1alpha1.StateHalfOpen || got.HalfOpen != 1 {
		t.Errorf("four open, one half-open: %+v", got)
	}

	// A pod behind the generation, or refusing it, judges another candidate: left out.
	fleet[5].entry.ConfigGeneration = 2
	fleet[6].entry.ConfigError = "candidate.window: must be greater than 0"
	if got := aggregateCandidate(cb, fleet); got.Pods != 8 {
		t.Errorf("pods %d, want the 8 on generation 3", got.Pods)
	}

	// Scope Fleet needs the quorum too.
	cb.Spec.Scope, cb.Spec.FleetQuorumPercent = resiliencev1alpha1.ScopeFleet, ptr.To[int32](80)
	for i := range fleet {
		fleet[i].entry.Candidate.State = resiliencev1alpha1.StateOpen
		if i >= 6 {
			fleet[i].entry.Candidate.State = resiliencev1alpha1.StateClosed
		}
	}
	fleet[5].entry.ConfigGeneration, fleet[6].entry.ConfigError = 3, ""
	if got := aggregateCandidate(cb, fleet); got.State != resiliencev1alpha1.StateClosed || got.Open != 6 {
		t.Errorf("six of ten open under a quorum of 80%%: %+v", got)
	}

	// No pod judging yet: pods 0 and no state; no candidate: no status.candidate.
	if got := aggregateCandidate(cb, nil); got == nil || got.Pods != 0 || got.State != "" {
		t.Errorf("no pods: %+v", got)
	}
	cb.Spec.Candidate = nil
	if got := aggregateCandidate(cb, fleet); got != nil {
		t.Errorf("no candidate: %+v", got)
	}
}

// since is the operator's: kept while the state stays, now when it changes.
func TestCandidateSince(t *testing.T) {
	was := metav1.NewTime(time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC))
	stored := &resiliencev1alpha1.CandidateStatus{State: resiliencev1alpha1.StateOpen, Since: &was}
	if got := candidateSince(stored, &resiliencev1alpha1.CandidateStatus{State: resiliencev1alpha1.StateOpen}); !got.Since.Equal(&was) {
		t.Errorf("same state: since %v, want %v", got.Since, was)
	}
	if got := candidateSince(stored, &resiliencev1alpha1.CandidateStatus{State: resiliencev1alpha1.StateClosed}); got.Since == nil || !got.Since.After(was.Time) {
		t.Errorf("a change: since %v, want now", got.Since)
	}
	if got := candidateSince(stored, &resiliencev1alpha1.CandidateStatus{}); got.Since != nil {
		t.Errorf("no state yet: since %v", got.Since)
	}
}
