package circuitbreaker

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// Defaulter fills in the unset fields of a CircuitBreaker's spec with their
// documented defaults. It never changes a field that is set.
type Defaulter struct{}

var _ admission.Defaulter[*resiliencev1alpha1.CircuitBreaker] = Defaulter{}

// Default implements admission.Defaulter.
func (Defaulter) Default(_ context.Context, cb *resiliencev1alpha1.CircuitBreaker) error {
	SetDefaults(&cb.Spec)
	return nil
}

// SetDefaults sets every unset field of s to its v1alpha1 default.
func SetDefaults(s *resiliencev1alpha1.CircuitBreakerSpec) {
	if s.OpenTimeout == nil {
		s.OpenTimeout = &metav1.Duration{Duration: resiliencev1alpha1.DefaultOpenTimeout}
	}
	if s.Window == nil {
		s.Window = &metav1.Duration{Duration: resiliencev1alpha1.DefaultWindow}
	}
	if s.FailureRatePercent == nil {
		s.FailureRatePercent = ptr.To[int32](resiliencev1alpha1.DefaultFailureRatePercent)
	}
	if s.MinimumThroughput == nil {
		s.MinimumThroughput = ptr.To[int32](resiliencev1alpha1.DefaultMinimumThroughput)
	}
	if s.SuccessThreshold == nil {
		s.SuccessThreshold = ptr.To[int32](resiliencev1alpha1.DefaultSuccessThreshold)
	}
	if s.HalfOpenPermittedCalls == nil {
		s.HalfOpenPermittedCalls = ptr.To[int32](resiliencev1alpha1.DefaultHalfOpenPermittedCalls)
	}
	if s.Mode == "" {
		s.Mode = resiliencev1alpha1.ModeEnforce
	}
	if s.Scope == "" {
		s.Scope = resiliencev1alpha1.ScopePod
	}
	if s.FleetQuorumPercent == nil {
		s.FleetQuorumPercent = ptr.To[int32](resiliencev1alpha1.DefaultFleetQuorumPercent)
	}
	if s.SlowCallRatePercent == nil {
		s.SlowCallRatePercent = ptr.To[int32](resiliencev1alpha1.DefaultSlowCallRatePercent)
	}
	// The two fleet policies stay unset unless asked for; set, their fields default.
	if b := s.RetryBudget; b != nil {
		if b.Percent == nil {
			b.Percent = ptr.To[int32](resiliencev1alpha1.DefaultRetryBudgetPercent)
		}
		if b.MinPerSecond == nil {
			b.MinPerSecond = ptr.To[int32](resiliencev1alpha1.DefaultRetryMinPerSecond)
		}
	}
	if t := s.Throttle; t != nil && t.K == nil {
		t.K = ptr.To(resiliencev1alpha1.DefaultThrottleK)
	}
	// Likewise the fleet's limit on calls in flight, and its limiter within it.
	if c := s.Concurrency; c != nil {
		if c.MaxWait == nil {
			c.MaxWait = &metav1.Duration{Duration: resiliencev1alpha1.DefaultMaxWait}
		}
		if a := c.Adaptive; a != nil {
			if a.Tolerance == nil {
				a.Tolerance = ptr.To(resiliencev1alpha1.DefaultAdaptiveTolerance)
			}
			if a.MinLimit == nil {
				a.MinLimit = ptr.To[int32](resiliencev1alpha1.DefaultAdaptiveMinLimit)
			}
		}
	}
}

// effective returns s with its defaults, leaving s alone: what the breaker runs.
func effective(s resiliencev1alpha1.CircuitBreakerSpec) resiliencev1alpha1.CircuitBreakerSpec {
	s = *s.DeepCopy()
	SetDefaults(&s)
	return s
}
