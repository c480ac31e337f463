package controller

import (
	"math"
	"time"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// The fleet's traffic (docs/design.md §4, §5.15, §5.16): for a breaker with a retry budget
// or adaptive throttling, each pod reports what its window holds, and the operator adds
// the reports up, publishes the pod count and the requests and accepts in the rendered
// config (fleet), and shows the sums and ratios in status.traffic.

// minFleetInterval is how often a change of the published fleet counts alone is written
// into the ConfigMap: every pod of the namespace reads each write, and the counts move
// with every pod's traffic report.
const minFleetInterval = time.Second

// usesTraffic says whether cb's pods report their traffic and read the fleet's.
func usesTraffic(cb *resiliencev1alpha1.CircuitBreaker) bool {
	return cb.Spec.RetryBudget != nil || cb.Spec.Throttle != nil
}

// anyUsesTraffic says whether any breaker renders from the reports' traffic.
func anyUsesTraffic(breakers []resiliencev1alpha1.CircuitBreaker) bool {
	for i := range breakers {
		if usesTraffic(&breakers[i]) {
			return true
		}
	}
	return false
}

// trafficSums is what a breaker's members report of their windows, added up.
type trafficSums struct {
	pods                                  int
	requests, accepts, retries, throttled int64
}

// sumTraffic adds up the members' traffic. Every running pod that reports the breaker
// counts as one of its pods, as the fleet verdict counts them (§5.12); its counts, which
// the schema bounds, are clamped to that bound again (a report stored before the bound
// existed) and added in int64, which 5,000 pods at the bound do not come near; the sums
// saturate rather than wrap for any number beyond.
func sumTraffic(members []member) trafficSums {
	s := trafficSums{pods: len(members)}
	add := func(sum *int64, n *int64) {
		if n == nil {
			return
		}
		*sum = min(*sum+min(max(*n, 0), breakerconfig.MaxTrafficCount), maxFleetCount)
	}
	for i := range members {
		e := &members[i].entry
		add(&s.requests, e.Requests)
		add(&s.accepts, e.Accepts)
		add(&s.retries, e.Retries)
		add(&s.throttled, e.Throttled)
	}
	return s
}

// maxFleetCount caps a fleet sum: the largest count a JSON reader that holds numbers as
// doubles reads exactly, far below where an int64 sum of clamped counts could wrap.
const maxFleetCount = 1<<53 - 1

// renderFleetPolicies adds the retry budget, the throttle and, with either, the fleet
// counts to c. Fields the API server did not default get the documented defaults.
func renderFleetPolicies(c *breakerconfig.Config, s resiliencev1alpha1.CircuitBreakerSpec, sums trafficSums) {
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
		c.Fleet = &breakerconfig.Fleet{Pods: sums.pods, Requests: sums.requests, Accepts: sums.accepts}
	}
}

// fleetOnly reports whether the published document differs from c in the fleet counts
// alone, so that its write may wait for minFleetInterval.
func fleetOnly(published string, c breakerconfig.Config) bool {
	if c.Fleet == nil {
		return false
	}
	old, err := breakerconfig.Parse([]byte(published))
	if err != nil || old.Fleet == nil {
		return false
	}
	c.Fleet = old.Fleet
	doc, err := breakerconfig.Marshal(c)
	return err == nil && string(doc) == published
}

// statusTraffic is status.traffic for sums: the counts, and the ratios in whole percent.
func statusTraffic(sums trafficSums) *resiliencev1alpha1.FleetTraffic {
	t := &resiliencev1alpha1.FleetTraffic{
		Pods:     saturated(int64(sums.pods)),
		Requests: sums.requests, Accepts: sums.accepts, Retries: sums.retries, Throttled: sums.throttled,
	}
	// A retry is a request too: the first attempts are the rest. A report may claim more
	// retries than requests; it then has no first attempts to measure against.
	if first := sums.requests - sums.retries; first > 0 {
		t.RetryPercent = roundPercent(sums.retries, first)
	}
	if sums.requests > 0 {
		t.ThrottledPercent = roundPercent(min(sums.throttled, sums.requests), sums.requests)
	}
	return t
}

// roundPercent is n of total in whole percent, rounded, as an int32 that saturates.
func roundPercent(n, total int64) *int32 {
	p := math.Round(100 * float64(n) / float64(total))
	v := int32(min(p, math.MaxInt32))
	return &v
}
