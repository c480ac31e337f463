package breaker

import (
	"fmt"
	"math"
)

// The policy's pointer fields (RetryBudget, Throttle, Adaptive): their validation, and the
// copying and comparison by value that the pointers would otherwise defeat.

// validateBudgetAndThrottle refuses a RetryBudget or Throttle no breaker could use; the
// CRD's tighter bounds (percent from 1, minPerSecond up to 10000, k up to 10) are the
// operator's.
func (p Policy) validateBudgetAndThrottle() []error {
	var errs []error
	if rb := p.RetryBudget; rb != nil {
		if rb.Percent < 0 || rb.Percent > 100 {
			errs = append(errs, &fieldError{Field: "retryBudget.percent", Value: fmt.Sprint(rb.Percent), Reason: "must be between 0 and 100"})
		}
		if rb.MinPerSecond < 0 {
			errs = append(errs, &fieldError{Field: "retryBudget.minPerSecond", Value: fmt.Sprint(rb.MinPerSecond), Reason: "must not be negative"})
		}
	}
	if th := p.Throttle; th != nil && !(th.K >= 1 && !math.IsInf(th.K, 1)) {
		// The negated comparison also refuses NaN.
		errs = append(errs, &fieldError{Field: "throttle.k", Value: formatFloat(th.K), Reason: "must be a finite number of at least 1"})
	}
	return errs
}

// validateConcurrency refuses a concurrency limit no breaker could use: a negative one, and
// an adaptive tolerance below 1 (which would cut the limit while the dependency answers
// at its baseline) or not finite. The CRD's tighter bounds (a tolerance up to 5) are the
// operator's.
func (p Policy) validateConcurrency() []error {
	var errs []error
	if p.MaxInFlight < 0 {
		errs = append(errs, &fieldError{Field: "concurrency.maxInFlight", Value: fmt.Sprint(p.MaxInFlight), Reason: "must not be negative (0 means no limit)"})
	}
	if a := p.Adaptive; a != nil {
		// The negated comparison also refuses NaN.
		if a.Tolerance != 0 && !(a.Tolerance >= 1 && !math.IsInf(a.Tolerance, 1)) {
			errs = append(errs, &fieldError{Field: "concurrency.adaptive.tolerance", Value: formatFloat(a.Tolerance), Reason: "must be a finite number of at least 1 (0 means 1.5)"})
		}
		if a.MinLimit < 0 {
			errs = append(errs, &fieldError{Field: "concurrency.adaptive.minLimit", Value: fmt.Sprint(a.MinLimit), Reason: "must be at least 1 (0 means 1)"})
		}
	}
	return errs
}

// clone returns p with RetryBudget and Throttle pointing at copies of their own, so that
// the caller who handed p in, or got it from Breaker.Policy, cannot change a breaker's
// policy by writing through them.
func (p Policy) clone() Policy {
	if p.RetryBudget != nil {
		rb := *p.RetryBudget
		p.RetryBudget = &rb
	}
	if p.Throttle != nil {
		th := *p.Throttle
		p.Throttle = &th
	}
	if p.Adaptive != nil {
		a := *p.Adaptive
		p.Adaptive = &a
	}
	return p
}

// equal compares two policies by value, RetryBudget, Throttle and Adaptive included.
func (p Policy) equal(q Policy) bool {
	if !equalPtr(p.RetryBudget, q.RetryBudget) || !equalPtr(p.Throttle, q.Throttle) || !equalPtr(p.Adaptive, q.Adaptive) {
		return false
	}
	p.RetryBudget, q.RetryBudget, p.Throttle, q.Throttle = nil, nil, nil, nil
	p.Adaptive, q.Adaptive = nil, nil
	return p == q
}

func equalPtr[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
