package controller

import (
	"time"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/counting"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// The fleet's traffic in the rendered config (docs/design.md §4, §5.15, §5.16): what the
// operator publishes for the pods of a breaker with a retry budget or adaptive
// throttling to act on, counted by counting.TrafficOf.

// minFleetInterval is how often a change of the published fleet counts alone is written
// into the ConfigMap: every pod of the namespace reads each write, and the counts move
// with every pod's traffic report.
const minFleetInterval = time.Second

// anyUsesTraffic says whether any breaker renders from the reports' traffic.
func anyUsesTraffic(breakers []resiliencev1alpha1.CircuitBreaker) bool {
	for i := range breakers {
		if counting.UsesTraffic(&breakers[i]) {
			return true
		}
	}
	return false
}

// renderFleetPolicies adds the retry budget, the throttle and, with either, the fleet
// counts to c. Fields the API server did not default get the documented defaults.
func renderFleetPolicies(c *breakerconfig.Config, s resiliencev1alpha1.CircuitBreakerSpec, traffic counting.FleetTraffic) {
	if b := s.RetryBudget; b != nil {
		c.RetryBudget = &breakerconfig.RetryBudget{
			Percent:      int(int32Or(b.Percent, resiliencev1alpha1.DefaultRetryBudgetPercent)),
			MinPerSecond: int(int32Or(b.MinPerSecond, resiliencev1alpha1.DefaultRetryMinPerSecond)),
		}
	}
	if t := s.Throttle; t != nil {
		k := resiliencev1alpha1.DefaultThrottleK
		if t.K != nil {
			k = *t.K
		}
		c.Throttle = &breakerconfig.Throttle{K: k}
	}
	if c.RetryBudget != nil || c.Throttle != nil {
		c.Fleet = &breakerconfig.Fleet{Pods: int(traffic.Pods), Requests: traffic.Median.Requests, Accepts: traffic.Median.Accepts}
	}
}

// fleetOnly reports whether the published document differs from c in what the operator
// counts of the pods alone (the fleet counts; a concurrency limit's share, its pods, its
// generation and the fleet's baseline), so that its write may wait for minFleetInterval.
func fleetOnly(published string, c breakerconfig.Config) bool {
	if c.Fleet == nil && c.Concurrency == nil {
		return false
	}
	old, err := breakerconfig.Parse([]byte(published))
	if err != nil || (old.Fleet == nil) != (c.Fleet == nil) || (old.Concurrency == nil) != (c.Concurrency == nil) {
		return false
	}
	c.Fleet = old.Fleet
	if k := c.Concurrency; k != nil {
		counted := *k
		counted.Share, counted.Pods, counted.Generation, counted.Baseline = old.Concurrency.Share, old.Concurrency.Pods, old.Concurrency.Generation, old.Concurrency.Baseline
		c.Concurrency = &counted
	}
	doc, err := breakerconfig.Marshal(c)
	return err == nil && string(doc) == published
}
