package policy

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// Render returns the policy s describes, as the document publishes it. Fields the API
// server did not default (an object stored before a default existed) get the documented
// defaults. slowCallRatio goes only with slowCallDuration, since a ratio alone judges
// nothing and a reader would take it for a setting in force; maxOpenTimeout whenever it is
// set. Left out, the pods judge no call slow and keep every open period at openTimeout
// (docs/design.md §5.13).
func Render(s resiliencev1alpha1.CircuitBreakerSpec) breakerconfig.Policy {
	p := breakerconfig.Policy{
		OpenTimeout:            breakerconfig.Duration(durationOr(s.OpenTimeout, resiliencev1alpha1.DefaultOpenTimeout)),
		Window:                 breakerconfig.Duration(durationOr(s.Window, resiliencev1alpha1.DefaultWindow)),
		FailureRatio:           ratio(s.FailureRatePercent, resiliencev1alpha1.DefaultFailureRatePercent),
		MinimumThroughput:      int(ptr.Deref(s.MinimumThroughput, resiliencev1alpha1.DefaultMinimumThroughput)),
		SuccessThreshold:       int(ptr.Deref(s.SuccessThreshold, resiliencev1alpha1.DefaultSuccessThreshold)),
		HalfOpenPermittedCalls: int(ptr.Deref(s.HalfOpenPermittedCalls, resiliencev1alpha1.DefaultHalfOpenPermittedCalls)),
	}
	if s.SlowCallDuration != nil {
		p.SlowCallDuration = breakerconfig.Duration(s.SlowCallDuration.Duration)
		p.SlowCallRatio = ratio(s.SlowCallRatePercent, resiliencev1alpha1.DefaultSlowCallRatePercent)
	}
	if s.MaxOpenTimeout != nil {
		p.MaxOpenTimeout = breakerconfig.Duration(s.MaxOpenTimeout.Duration)
	}
	return p
}

// Candidate returns spec.candidate as the pods judge it: every policy field resolved, the
// spec's where the candidate sets none and the default where neither does. nil without a
// candidate.
func Candidate(s resiliencev1alpha1.CircuitBreakerSpec) *breakerconfig.Candidate {
	if s.Candidate == nil {
		return nil
	}
	return &breakerconfig.Candidate{Policy: Render(CandidateSpec(s))}
}

// CandidateSpec returns the spec the candidate describes: s with each policy field the
// candidate sets in place of its own, and no candidate. It is what the pods judge in
// shadow, and what `kubectl fusebox promote` makes the spec. Without a candidate it is s
// without one.
func CandidateSpec(s resiliencev1alpha1.CircuitBreakerSpec) resiliencev1alpha1.CircuitBreakerSpec {
	out := *s.DeepCopy()
	c := out.Candidate
	out.Candidate = nil
	if c == nil {
		return out
	}
	overlay(&out.OpenTimeout, c.OpenTimeout)
	overlay(&out.Window, c.Window)
	overlay(&out.FailureRatePercent, c.FailureRatePercent)
	overlay(&out.MinimumThroughput, c.MinimumThroughput)
	overlay(&out.SuccessThreshold, c.SuccessThreshold)
	overlay(&out.HalfOpenPermittedCalls, c.HalfOpenPermittedCalls)
	overlay(&out.SlowCallDuration, c.SlowCallDuration)
	overlay(&out.SlowCallRatePercent, c.SlowCallRatePercent)
	overlay(&out.MaxOpenTimeout, c.MaxOpenTimeout)
	return out
}

// overlay sets *dst to src when src is set.
func overlay[T any](dst **T, src *T) {
	if src != nil {
		*dst = src
	}
}

// ratio is a percent field as the document's ratio: the one place a percent is turned
// into one.
func ratio(percent *int32, def int32) float64 { return float64(ptr.Deref(percent, def)) / 100 }

func durationOr(d *metav1.Duration, def time.Duration) time.Duration {
	if d == nil {
		return def
	}
	return d.Duration
}
