package controller

import (
	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/counting"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// One bulkhead for the fleet in the rendered config (docs/design.md §12): each pod's share
// of spec.concurrency.maxInFlight, divided among the pods counting.ConcurrencyOf counts,
// published again whenever they change. A change of the share alone (a pod came or went)
// is coalesced like the fleet counts (minFleetInterval, fleetOnly): every pod of the
// namespace reads each write, and a rolling update moves the count with every pod.

// renderConcurrency is the concurrency object of a breaker with spec.concurrency (nil
// without), its share divided among the pods counted and published under generation.
// Fields the API server did not default get the documented defaults.
func renderConcurrency(s *resiliencev1alpha1.Concurrency, counted counting.FleetConcurrency, generation int64) *breakerconfig.Concurrency {
	if s == nil {
		return nil
	}
	c := &breakerconfig.Concurrency{
		Share: int(counted.Share), Pods: int(counted.Pods), Generation: generation,
		MaxWait:  breakerconfig.Duration(durationOr(s.MaxWait, resiliencev1alpha1.DefaultMaxWait)),
		Baseline: breakerconfig.Duration(counted.Baseline),
	}
	if a := s.Adaptive; a != nil {
		tolerance := resiliencev1alpha1.DefaultAdaptiveTolerance
		if a.Tolerance != nil {
			tolerance = *a.Tolerance
		}
		c.Adaptive = &breakerconfig.AdaptiveConcurrency{Tolerance: tolerance, MinLimit: int(int32Or(a.MinLimit, resiliencev1alpha1.DefaultAdaptiveMinLimit))}
	}
	return c
}

// shareGeneration is the generation a share divided as counted is published under: the
// published one while the share and the pods it was divided among stay as published,
// one more when either moved, and 1 when nothing was published. It reads only the
// ConfigMap, so a restarted operator, or a reconcile whose write was put off, publishes
// the same generation. A pod that started since a generation was published takes the
// share as not yet counting itself until the generation moves (breakerconfig.Limit).
func shareGeneration(published string, counted counting.FleetConcurrency) int64 {
	if published == "" {
		return 1
	}
	old, err := breakerconfig.Parse([]byte(published))
	if err != nil || old.Concurrency == nil {
		return 1
	}
	g := old.Concurrency.Generation
	if int64(old.Concurrency.Share) != counted.Share || int64(old.Concurrency.Pods) != counted.Pods {
		g++
	}
	return max(g, 1)
}
