package circuitbreaker

import (
	"fmt"
	"reflect"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/policy"
)

// validateCandidate judges spec.candidate as the schema does (docs/design.md §11): its
// durations whole milliseconds, and the open period it ends up with, its own fields or
// the spec's where it sets none, no longer than the backoff's cap. As for the spec, a
// field the update leaves as it was is not judged.
func validateCandidate(s, old *resiliencev1alpha1.CircuitBreakerSpec, path *field.Path) field.ErrorList {
	c := s.Candidate
	if c == nil {
		return nil
	}
	var was resiliencev1alpha1.CandidatePolicy
	var oldEffective resiliencev1alpha1.CircuitBreakerSpec
	if old != nil && old.Candidate != nil {
		was, oldEffective = *old.Candidate, effective(policy.CandidateSpec(*old))
	}
	updating := old != nil && old.Candidate != nil
	var errs field.ErrorList
	for _, d := range []struct {
		name     string
		now, was *metav1.Duration
	}{
		{"openTimeout", c.OpenTimeout, was.OpenTimeout},
		{"window", c.Window, was.Window},
		{"slowCallDuration", c.SlowCallDuration, was.SlowCallDuration},
		{"maxOpenTimeout", c.MaxOpenTimeout, was.MaxOpenTimeout},
	} {
		if d.now == nil || d.now.Duration%1e6 == 0 || updating && d.was != nil && d.was.Duration == d.now.Duration {
			continue
		}
		errs = append(errs, field.Invalid(path.Child(d.name), d.now.Duration.String(), "must be a whole number of milliseconds"))
	}
	// With the defaults the API server fills in before it asks the webhook.
	judged := effective(policy.CandidateSpec(*s))
	open, most := judged.OpenTimeout, judged.MaxOpenTimeout
	if open == nil || most == nil || most.Duration >= open.Duration {
		return errs
	}
	if updating && oldEffective.OpenTimeout != nil && oldEffective.MaxOpenTimeout != nil &&
		*oldEffective.OpenTimeout == *open && *oldEffective.MaxOpenTimeout == *most {
		return errs
	}
	// Named as the schema names it: the candidate's own field where it sets the pair's
	// other half from the spec.
	switch {
	case c.MaxOpenTimeout != nil && c.OpenTimeout != nil:
		errs = append(errs, field.Invalid(path.Child("maxOpenTimeout"), most.Duration.String(), "maxOpenTimeout must be at least openTimeout"))
	case c.MaxOpenTimeout != nil:
		errs = append(errs, field.Invalid(path.Child("maxOpenTimeout"), most.Duration.String(),
			"must be at least openTimeout: the candidate sets no openTimeout of its own, so it is the spec's"))
	case c.OpenTimeout != nil:
		errs = append(errs, field.Invalid(path.Child("openTimeout"), open.Duration.String(),
			"must be at most maxOpenTimeout: the candidate sets no maxOpenTimeout of its own, so it is the spec's; set candidate.maxOpenTimeout too"))
	}
	return errs
}

// candidateWarnings are Warnings' findings about spec.candidate: a candidate that judges
// exactly as the enforced policy does, and one that can judge nothing because the mode
// runs no call. s is cb's spec with its defaults.
func candidateWarnings(cb *resiliencev1alpha1.CircuitBreaker, s resiliencev1alpha1.CircuitBreakerSpec) []string {
	if cb.Spec.Candidate == nil {
		return nil
	}
	var w []string
	if candidate := effective(policy.CandidateSpec(cb.Spec)); reflect.DeepEqual(candidate, withoutCandidate(s)) {
		w = append(w, "spec.candidate sets nothing the spec does not already: it judges every call exactly as the enforced policy does, so it can tell you nothing; set the fields you want to try")
	}
	if s.Mode == resiliencev1alpha1.ModeForcedOpen {
		w = append(w, fmt.Sprintf("spec.candidate is judged on the calls that run, and spec.mode %s runs none: it will show nothing until the mode lets calls through", s.Mode))
	}
	return w
}

// withoutCandidate is s with no candidate.
func withoutCandidate(s resiliencev1alpha1.CircuitBreakerSpec) resiliencev1alpha1.CircuitBreakerSpec {
	s.Candidate = nil
	return s
}
