package v1alpha1

import (
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestCandidateSpecOverlaysWhatTheCandidateSets(t *testing.T) {
	d := func(s string) *metav1.Duration {
		v, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		return &metav1.Duration{Duration: v}
	}
	spec := CircuitBreakerSpec{
		OpenTimeout: d("30s"), Window: d("10s"), FailureRatePercent: ptr(int32(50)), MinimumThroughput: ptr(int32(100)),
		SuccessThreshold: ptr(int32(2)), HalfOpenPermittedCalls: ptr(int32(1)), Mode: ModeEnforce, Scope: ScopeFleet,
		SlowCallRatePercent: ptr(int32(100)), MaxOpenTimeout: d("5m"),
		Throttle: &Throttle{K: ptr(2.0)},
		Candidate: &CandidatePolicy{
			FailureRatePercent: ptr(int32(20)), OpenTimeout: d("1m"), SlowCallDuration: d("2s"),
		},
	}
	before := *spec.DeepCopy()
	got := spec.CandidateSpec()
	want := *before.DeepCopy()
	want.Candidate = nil
	want.FailureRatePercent, want.OpenTimeout, want.SlowCallDuration = ptr(int32(20)), d("1m"), d("2s")
	if !reflect.DeepEqual(got, want) {
		t.Errorf("CandidateSpec:\n got %+v\nwant %+v", got, want)
	}
	if !reflect.DeepEqual(spec, before) {
		t.Errorf("CandidateSpec changed the spec it was called on")
	}
	*got.FailureRatePercent = 99
	if *spec.Candidate.FailureRatePercent != 20 {
		t.Errorf("the result shares the candidate's values")
	}
	spec.Candidate = nil
	if got := spec.CandidateSpec(); !reflect.DeepEqual(got, spec) {
		t.Errorf("without a candidate: %+v, want the spec", got)
	}
}
