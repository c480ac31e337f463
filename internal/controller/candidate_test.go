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

// The candidate is rendered resolved: the spec's fields where it sets none, the defaults
// where neither does.
func TestRenderCandidateResolvesAgainstTheSpec(t *testing.T) {
	cb := withCandidate(1, resiliencev1alpha1.CandidatePolicy{FailureRatePercent: ptr.To[int32](10), SlowCallDuration: &metav1.Duration{Duration: 2 * time.Second}})
	c, err := render(cb, nil, fleetCounts{})
	if err != nil {
		t.Fatal(err)
	}
	want := breakerconfig.Candidate{Policy: breakerconfig.Policy{OpenTimeout: breakerconfig.Duration(time.Minute), Window: breakerconfig.Duration(10 * time.Second),
		FailureRatio: 0.1, MinimumThroughput: 20, SuccessThreshold: 2, HalfOpenPermittedCalls: 1,
		SlowCallDuration: breakerconfig.Duration(2 * time.Second), SlowCallRatio: 1}}
	if c.Candidate == nil || *c.Candidate != want {
		t.Errorf("rendered candidate %+v, want %+v", c.Candidate, want)
	}
	cb.Spec.Candidate = nil
	if c, err := render(cb, nil, fleetCounts{}); err != nil || c.Candidate != nil {
		t.Errorf("without a candidate: %+v, %v", c.Candidate, err)
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
