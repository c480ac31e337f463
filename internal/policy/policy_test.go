package policy

import (
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

func TestCandidateSpecOverlaysWhatTheCandidateSets(t *testing.T) {
	d := func(s string) *metav1.Duration {
		v, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		return &metav1.Duration{Duration: v}
	}
	spec := resiliencev1alpha1.CircuitBreakerSpec{
		OpenTimeout: d("30s"), Window: d("10s"), FailureRatePercent: ptr.To(int32(50)), MinimumThroughput: ptr.To(int32(100)),
		SuccessThreshold: ptr.To(int32(2)), HalfOpenPermittedCalls: ptr.To(int32(1)), Mode: resiliencev1alpha1.ModeEnforce, Scope: resiliencev1alpha1.ScopeFleet,
		SlowCallRatePercent: ptr.To(int32(100)), MaxOpenTimeout: d("5m"),
		Throttle: &resiliencev1alpha1.Throttle{K: ptr.To(2.0)},
		Candidate: &resiliencev1alpha1.CandidatePolicy{
			FailureRatePercent: ptr.To(int32(20)), OpenTimeout: d("1m"), SlowCallDuration: d("2s"),
		},
	}
	before := *spec.DeepCopy()
	got := CandidateSpec(spec)
	want := *before.DeepCopy()
	want.Candidate = nil
	want.FailureRatePercent, want.OpenTimeout, want.SlowCallDuration = ptr.To(int32(20)), d("1m"), d("2s")
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
	if got := CandidateSpec(spec); !reflect.DeepEqual(got, spec) {
		t.Errorf("without a candidate: %+v, want the spec", got)
	}
}
