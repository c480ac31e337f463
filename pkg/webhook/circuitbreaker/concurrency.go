package circuitbreaker

import (
	"fmt"
	"math"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// Bounds of spec.concurrency, the schema's too (docs/design.md §3, §12).
const (
	maxMaxWait                     = 10 * time.Second
	minTolerance, maxTolerance     = 1.0, 5.0
	minConcurrency, maxConcurrency = 1, resiliencev1alpha1.MaxInFlight
)

// validateConcurrency refuses what the schema refuses of spec.concurrency, naming the
// field, for an API server that runs the webhook with an older CRD (or none of its
// bounds). A field the update leaves as it was is not judged.
func validateConcurrency(c, old *resiliencev1alpha1.Concurrency, path *field.Path) field.ErrorList {
	if c == nil {
		return nil
	}
	stored := old != nil
	if old == nil {
		old = &resiliencev1alpha1.Concurrency{}
	}
	var errs field.ErrorList
	if n := c.MaxInFlight; (n < minConcurrency || n > maxConcurrency) && (!stored || n != old.MaxInFlight) {
		errs = append(errs, field.Invalid(path.Child("maxInFlight"), n,
			fmt.Sprintf("must be between %d and %d: the most calls the whole fleet may have in flight at once", minConcurrency, maxConcurrency)))
	}
	if w := c.MaxWait; w != nil && (old.MaxWait == nil || old.MaxWait.Duration != w.Duration) {
		switch {
		case w.Duration < 0 || w.Duration > maxMaxWait:
			errs = append(errs, field.Invalid(path.Child("maxWait"), w.Duration.String(), "must be between 0s and 10s"))
		case w.Duration%time.Millisecond != 0:
			errs = append(errs, field.Invalid(path.Child("maxWait"), w.Duration.String(), "must be a whole number of milliseconds"))
		}
	}
	a, was := c.Adaptive, old.Adaptive
	if a == nil {
		return errs
	}
	if was == nil {
		was = &resiliencev1alpha1.AdaptiveConcurrency{}
	}
	// Written so that NaN, which a Go client can send, fails too.
	if t := a.Tolerance; t != nil && !(*t >= minTolerance && *t <= maxTolerance) && (was.Tolerance == nil || math.Float64bits(*was.Tolerance) != math.Float64bits(*t)) {
		errs = append(errs, field.Invalid(path.Child("adaptive", "tolerance"), *t,
			fmt.Sprintf("must be between %g and %g: how many times the baseline latency calls may take before a pod lowers its limit", minTolerance, maxTolerance)))
	}
	if m := a.MinLimit; m != nil && (*m < minConcurrency || *m > maxConcurrency) && !sameInt32(m, was.MinLimit) {
		errs = append(errs, field.Invalid(path.Child("adaptive", "minLimit"), *m,
			fmt.Sprintf("must be between %d and %d", minConcurrency, maxConcurrency)))
	}
	return errs
}

// concurrencyWarnings are Warnings' findings about spec.concurrency, for a breaker that
// reporting pods report (as the stored status counts them):
//   - maxInFlight below the reporting pods: every pod's share is at least 1, so the fleet
//     may have more calls in flight than the limit says;
//   - maxWait longer than window: callers queue for a slot longer than the breaker takes
//     to judge a whole window, so they pile up behind a saturated dependency instead of
//     being refused.
func concurrencyWarnings(s resiliencev1alpha1.CircuitBreakerSpec, reporting int32) []string {
	c := s.Concurrency
	if c == nil {
		return nil
	}
	var w []string
	if reporting > c.MaxInFlight {
		w = append(w, fmt.Sprintf("spec.concurrency.maxInFlight (%d) is below the %d pods that report this breaker: each pod's share is at least 1, so the fleet may have %d calls in flight; raise it, or run fewer pods",
			c.MaxInFlight, reporting, reporting))
	}
	if c.MaxWait != nil && c.MaxWait.Duration > s.Window.Duration {
		w = append(w, fmt.Sprintf("spec.concurrency.maxWait (%s) is longer than spec.window (%s): callers wait for a slot longer than the breaker takes to judge a window, and pile up behind a saturated dependency instead of being refused",
			c.MaxWait.Duration, s.Window.Duration))
	}
	return w
}

// reportingPods is how many pods the status of cb counts as reporting it.
func reportingPods(cb *resiliencev1alpha1.CircuitBreaker) int32 {
	if m := cb.Status.MemberCounts; m != nil {
		return m.Reporting
	}
	return 0
}
