package counting

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
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

// judgingMember is a closed pod on generation gen that judges the candidate.
func judgingMember(pod string, gen int64, state resiliencev1alpha1.State, opens, wouldRefuse int64) member {
	start := metav1.NewTime(time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC))
	return member{pod: pod, entry: resiliencev1alpha1.BreakerReportEntry{
		Name: "payments-api", PodCircuit: resiliencev1alpha1.PodCircuit{State: closed, ConfigGeneration: gen},
		Candidate: &resiliencev1alpha1.CandidateReport{
			State: state, Opens: opens, WouldRefuse: wouldRefuse, StartTime: &start,
			TimeOpen: &metav1.Duration{Duration: time.Duration(opens) * 10 * time.Second},
			Enforced: &resiliencev1alpha1.CandidateBaseline{Opens: 0, Refused: 0, TimeOpen: &metav1.Duration{}},
		},
	}}
}

// Ten pods judge the candidate; the ones that count are those on the current generation.
// The state is the one at least half hold; opens and wouldRefuse sum, a rogue pod's for at
// most four times the upper median pod's.
func TestAggregateCandidate(t *testing.T) {
	cb := withCandidate(3, resiliencev1alpha1.CandidatePolicy{FailureRatePercent: ptr.To[int32](10)})
	var fleet []member
	for i := range 10 {
		fleet = append(fleet, judgingMember(string(rune('a'+i)), 3, open, 2, 100))
	}
	got := aggregateCandidate(cb, entriesOf(fleet...))
	if got.Pods != 10 || got.State != open || got.Open != 10 || got.Opens != 20 || got.WouldRefuse != 1000 ||
		got.TimeOpen.Duration != 20*time.Second || got.Enforced == nil || got.Enforced.Refused != 0 || got.StartTime == nil {
		t.Errorf("ten open pods: %+v", got)
	}

	// Four of ten open: not enough for Open; a rogue reports the bound.
	for i := range fleet {
		fleet[i].entry.Candidate.State = closed
		if i < 4 {
			fleet[i].entry.Candidate.State = open
		}
	}
	fleet[0].entry.Candidate.WouldRefuse = resiliencev1alpha1.MaxCandidateCount
	got = aggregateCandidate(cb, entriesOf(fleet...))
	if got.State != closed || got.Open != 4 || got.WouldRefuse != 9*100+4*100 {
		t.Errorf("four of ten open, one rogue: %+v", got)
	}
	fleet[4].entry.Candidate.State = halfOpen
	if got := aggregateCandidate(cb, entriesOf(fleet...)); got.State != halfOpen || got.HalfOpen != 1 {
		t.Errorf("four open, one half-open: %+v", got)
	}

	// A pod behind the generation, or refusing it, judges another candidate: left out.
	fleet[5].entry.ConfigGeneration = 2
	fleet[6].entry.ConfigError = "candidate.window: must be greater than 0"
	if got := aggregateCandidate(cb, entriesOf(fleet...)); got.Pods != 8 {
		t.Errorf("pods %d, want the 8 on generation 3", got.Pods)
	}

	// Scope Fleet needs the quorum too.
	cb.Spec.Scope, cb.Spec.FleetQuorumPercent = resiliencev1alpha1.ScopeFleet, ptr.To[int32](80)
	for i := range fleet {
		fleet[i].entry.Candidate.State = open
		if i >= 6 {
			fleet[i].entry.Candidate.State = closed
		}
	}
	fleet[5].entry.ConfigGeneration, fleet[6].entry.ConfigError = 3, ""
	if got := aggregateCandidate(cb, entriesOf(fleet...)); got.State != closed || got.Open != 6 {
		t.Errorf("six of ten open under a quorum of 80%%: %+v", got)
	}

	// A breaker Group's pods judge no candidate.
	group := judgingMember("g", 3, open, 1, 1)
	group.entry.Keys = &resiliencev1alpha1.KeySummary{Keys: 1}
	if got := aggregateCandidate(cb, entriesOf(group)); got.Pods != 0 {
		t.Errorf("a Group's candidate counted: %+v", got)
	}

	// No pod judging yet: pods 0 and no state; no candidate: no status.candidate.
	if got := aggregateCandidate(cb, nil); got == nil || got.Pods != 0 || got.State != "" {
		t.Errorf("no pods: %+v", got)
	}
	cb.Spec.Candidate = nil
	if got := aggregateCandidate(cb, entriesOf(fleet...)); got != nil {
		t.Errorf("no candidate: %+v", got)
	}
}
