package circuitbreaker

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// MaxNameLength is the longest CircuitBreaker name whose ConfigMap key
// <name>.json is still a valid key (at most 253 characters).
const MaxNameLength = breakerconfig.MaxKeyNameLength

// Validator refuses CircuitBreakers that the schema and CEL let through but
// that cannot be published or run as written, and warns about risky ones.
type Validator struct {
	// Now is the time an override's until is judged against; nil means the wall clock.
	Now func() time.Time
}

var _ admission.Validator[*resiliencev1alpha1.CircuitBreaker] = Validator{}

// ValidateCreate implements admission.Validator.
func (v Validator) ValidateCreate(_ context.Context, cb *resiliencev1alpha1.CircuitBreaker) (admission.Warnings, error) {
	errs := validateName(cb.Name)
	errs = append(errs, validateSpec(&cb.Spec, nil, field.NewPath("spec"))...)
	errs = append(errs, validateOverride(cb.Spec.Override, nil, v.now(), field.NewPath("spec", "override"))...)
	return Warnings(cb), invalid(cb, errs)
}

// ValidateUpdate implements admission.Validator. Names are immutable, so only
// the spec is judged, and only in the fields the update changes.
func (v Validator) ValidateUpdate(_ context.Context, old, cb *resiliencev1alpha1.CircuitBreaker) (admission.Warnings, error) {
	if cb.DeletionTimestamp != nil {
		// The object is on its way out (this is a finalizer being removed, say):
		// judging or warning about it helps no one.
		return nil, nil
	}
	errs := validateSpec(&cb.Spec, &old.Spec, field.NewPath("spec"))
	errs = append(errs, validateOverride(cb.Spec.Override, old.Spec.Override, v.now(), field.NewPath("spec", "override"))...)
	return warnings(cb, reportingPods(old)), invalid(cb, errs)
}

func (v Validator) now() time.Time {
	if v.Now != nil {
		return v.Now()
	}
	return time.Now()
}

// ValidateDelete implements admission.Validator; deleting is always allowed.
// (The webhook is not registered for deletes; this completes the interface.)
func (Validator) ValidateDelete(context.Context, *resiliencev1alpha1.CircuitBreaker) (admission.Warnings, error) {
	return nil, nil
}

func invalid(cb *resiliencev1alpha1.CircuitBreaker, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(resiliencev1alpha1.GroupVersion.WithKind("CircuitBreaker").GroupKind(), cb.Name, errs)
}

// validateName refuses a name under which the breaker could not be published:
// the ConfigMap key <name>.json must be a valid key. The API server already
// holds the name to DNS subdomain rules (at most 253 characters), so in
// practice this refuses names longer than MaxNameLength.
func validateName(name string) field.ErrorList {
	if name == "" {
		// generateName: the API server names the object after mutating
		// admission and before validation, so an empty name does not reach here
		// from the API server. Nothing to judge otherwise.
		return nil
	}
	var errs field.ErrorList
	for _, msg := range validation.IsConfigMapKey(breakerconfig.Key(name)) {
		errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), name,
			fmt.Sprintf("the breaker is published under the ConfigMap key %q, which is not a valid key: %s (names may be at most %d characters)",
				truncate(breakerconfig.Key(name), 40), msg, MaxNameLength)))
	}
	return errs
}

// validateSpec refuses durations that are not a whole number of milliseconds.
// The bounds (1s to 24h, 1s to 1h, 1ms to 1h, up to 24h) are the schema's; this rule is one CEL
// states badly. A breaker's timings are judged at millisecond resolution at
// best, so digits below a millisecond are a typo ("1.0000001s"), and a window
// that is not whole milliseconds puts the epoch-aligned buckets (docs/design.md §5.1)
// on boundaries no clock or dashboard shares.
//
// With old set (an update), a field is judged only if the update changes it:
// rules are ratcheted, so an object stored before a rule existed stays
// updatable.
func validateSpec(s, old *resiliencev1alpha1.CircuitBreakerSpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	check := func(name string, d, was *metav1.Duration, oldSpec bool) {
		if d == nil || d.Duration%time.Millisecond == 0 {
			return
		}
		if oldSpec && was != nil && was.Duration == d.Duration {
			return
		}
		errs = append(errs, field.Invalid(path.Child(name), d.Duration.String(), "must be a whole number of milliseconds"))
	}
	var oldTimeout, oldWindow, oldSlow, oldMax *metav1.Duration
	if old != nil {
		oldTimeout, oldWindow, oldSlow, oldMax = old.OpenTimeout, old.Window, old.SlowCallDuration, old.MaxOpenTimeout
	}
	check("openTimeout", s.OpenTimeout, oldTimeout, old != nil)
	check("window", s.Window, oldWindow, old != nil)
	check("slowCallDuration", s.SlowCallDuration, oldSlow, old != nil)
	check("maxOpenTimeout", s.MaxOpenTimeout, oldMax, old != nil)
	var oldBudget *resiliencev1alpha1.RetryBudget
	var oldThrottle *resiliencev1alpha1.Throttle
	var oldConcurrency *resiliencev1alpha1.Concurrency
	if old != nil {
		oldBudget, oldThrottle, oldConcurrency = old.RetryBudget, old.Throttle, old.Concurrency
	}
	errs = append(errs, validateRetryBudget(s.RetryBudget, oldBudget, path.Child("retryBudget"))...)
	errs = append(errs, validateThrottle(s.Throttle, oldThrottle, path.Child("throttle"))...)
	errs = append(errs, validateConcurrency(s.Concurrency, oldConcurrency, path.Child("concurrency"))...)
	errs = append(errs, validateCandidate(s, old, path.Child("candidate"))...)
	return errs
}

// Bounds of the fleet policies, the schema's too (docs/design.md §3).
const (
	minRetryPercent, maxRetryPercent = 1, 100
	maxRetryMinPerSecond             = 10000
	minThrottleK, maxThrottleK       = 1.0, 10.0
)

// validateRetryBudget refuses what the schema refuses of spec.retryBudget, in the same
// words, for an API server that runs the webhook with an older CRD (or none of its
// bounds). A field the update leaves as it was is not judged.
func validateRetryBudget(b, old *resiliencev1alpha1.RetryBudget, path *field.Path) field.ErrorList {
	if b == nil {
		return nil
	}
	var errs field.ErrorList
	var oldPercent, oldFloor *int32
	if old != nil {
		oldPercent, oldFloor = old.Percent, old.MinPerSecond
	}
	if p := b.Percent; p != nil && (*p < minRetryPercent || *p > maxRetryPercent) && !sameInt32(p, oldPercent) {
		errs = append(errs, field.Invalid(path.Child("percent"), *p,
			fmt.Sprintf("must be between %d and %d: the share of first attempts that may be retried, in percent", minRetryPercent, maxRetryPercent)))
	}
	if f := b.MinPerSecond; f != nil && (*f < 0 || *f > maxRetryMinPerSecond) && !sameInt32(f, oldFloor) {
		errs = append(errs, field.Invalid(path.Child("minPerSecond"), *f,
			fmt.Sprintf("must be between 0 and %d: the whole fleet's floor of retries a second", maxRetryMinPerSecond)))
	}
	return errs
}

func sameInt32(a, b *int32) bool { return a != nil && b != nil && *a == *b }

// validateThrottle refuses a k outside [1, 10]: below 1 throttling would reject calls
// the dependency accepts.
func validateThrottle(t, old *resiliencev1alpha1.Throttle, path *field.Path) field.ErrorList {
	if t == nil || t.K == nil {
		return nil
	}
	k := *t.K
	if k >= minThrottleK && k <= maxThrottleK {
		return nil
	}
	if old != nil && old.K != nil && *old.K == k {
		return nil
	}
	return field.ErrorList{field.Invalid(path.Child("k"), k,
		fmt.Sprintf("must be between %g and %g: below 1 throttling would reject calls the dependency accepts", minThrottleK, maxThrottleK))}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
