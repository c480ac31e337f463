package breaker

import (
	"fmt"
	"math"
)

// The policy's pointer fields (RetryBudget, Throttle): their validation, and the copying
// and comparison by value that the pointers would otherwise defeat.

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
	return p
}

// equal compares two policies by value, RetryBudget and Throttle included.
func (p Policy) equal(q Policy) bool {
	if !equalPtr(p.RetryBudget, q.RetryBudget) || !equalPtr(p.Throttle, q.Throttle) {
		return false
	}
	p.RetryBudget, q.RetryBudget, p.Throttle, q.Throttle = nil, nil, nil, nil
	return p == q
}

func equalPtr[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
