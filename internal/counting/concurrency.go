package counting

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// One bulkhead for the fleet (docs/design.md §12): spec.concurrency.maxInFlight divided
// among the pods the operator counts (§9), each pod's share published in its rendered
// config, and what the pods report of their windows added up into status.concurrency.
// One pod, one share (§5.17):
//
//   - pods counts the running pods that report the breaker, each once, as fleet.pods does;
//   - the fleet's baseline latency is the median pod's, each carrier's weighing as many
//     pods as it counts for, so carriers of fewer than half of the pods cannot take it
//     outside the range the others' own baselines span;
//   - status.concurrency.inFlight adds up the pods' in-flight peaks, each carrier's at
//     most the share times its pods (no pod may hold more than its share), and limited
//     adds up their refusals, each carrier's bounded as traffic is.

// Share is one pod's part of a fleet-wide limit on calls in flight (docs/design.md §12):
// maxInFlight divided among the pods that count, rounded down, and at least 1, so that
// a fleet of more pods than the limit still lets each pod make a call. With no pods
// counted yet a pod takes the whole limit: the first pod of a fleet is the fleet.
func Share(maxInFlight, pods int64) int64 {
	if maxInFlight <= 0 {
		return 0
	}
	if pods <= 0 {
		return maxInFlight
	}
	return max(1, maxInFlight/pods)
}

// ShareBeforeTold is the limit a pod uses after the fleet grew and before the operator
// has told it its new share (docs/design.md §12, the retry budget's floor rule): the last
// share published, divided among the pods it counted plus the one more the pod knows of,
// itself. A pod that has been told nothing uses the whole share. The pods apply it as
// breakerconfig.ShareBeforeTold, which a test holds to this.
func ShareBeforeTold(lastShare, lastPods int64) int64 {
	if lastShare <= 0 {
		return 0
	}
	if lastPods <= 0 {
		return lastShare
	}
	return max(1, lastShare*lastPods/(lastPods+1))
}

// InFlight is what a carrier says of its pods' concurrency over their windows: the most
// calls in flight at once (a node's: its pods' peaks added up), the calls refused over the
// limit, and the baseline latency (a node's: its median pod's; 0 for none).
type InFlight struct {
	Peak, Limited int64
	Baseline      time.Duration
}

// UsesConcurrency says whether cb limits its calls in flight for the fleet.
func UsesConcurrency(cb *resiliencev1alpha1.CircuitBreaker) bool {
	return cb.Spec.Concurrency != nil
}

// FleetConcurrency is what the operator makes of a breaker's entries' concurrency: how
// maxInFlight divides among the pods, and the fleet's figures.
type FleetConcurrency struct {
	MaxInFlight, Pods, Share int64
	// InFlight and Limited are the bounded sums of status.concurrency.
	InFlight, Limited int64
	// Baseline is the fleet's baseline latency, published to the pods; 0 while no pod
	// reports one.
	Baseline time.Duration
}

// ConcurrencyOf is the fleet's concurrency over cb's entries (see the rules above); the
// zero value for a breaker without spec.concurrency.
func ConcurrencyOf(cb *resiliencev1alpha1.CircuitBreaker, entries []Entry) FleetConcurrency {
	c := cb.Spec.Concurrency
	if c == nil {
		return FleetConcurrency{}
	}
	f := FleetConcurrency{MaxInFlight: count(int64(c.MaxInFlight), resiliencev1alpha1.MaxInFlight)}
	var baselines, limited []weighted[int64]
	for i := range entries {
		e := &entries[i]
		if e.Pods <= 0 {
			continue
		}
		f.Pods += e.Pods
		limited = append(limited, weighted[int64]{e.InFlight.Limited, e.Pods})
		if e.InFlight.Baseline > 0 {
			baselines = append(baselines, weighted[int64]{int64(e.InFlight.Baseline), e.Pods})
		}
	}
	f.Share = Share(f.MaxInFlight, f.Pods)
	for i := range entries {
		if e := &entries[i]; e.Pods > 0 {
			f.InFlight = min(f.InFlight+min(e.InFlight.Peak, mulSat(f.Share, e.Pods)), maxFleetCount)
		}
	}
	floor := int64(ptr.Deref(cb.Spec.MinimumThroughput, resiliencev1alpha1.DefaultMinimumThroughput))
	f.Limited = boundedSum(limited, floor, maxFleetCount)
	// The upper median of an even count: a lie that sets the baseline high only keeps the
	// pods' limiters from lowering their limits (their shares still hold), where one that
	// set it low would take every pod down to its minLimit.
	f.Baseline = time.Duration(upperMedian(baselines, compareInt64))
	return f
}

// StatusConcurrency is status.concurrency for f.
func StatusConcurrency(f FleetConcurrency) *resiliencev1alpha1.FleetConcurrency {
	return &resiliencev1alpha1.FleetConcurrency{
		MaxInFlight: saturated(f.MaxInFlight), Pods: saturated(f.Pods), Share: saturated(f.Share),
		InFlight: f.InFlight, Limited: f.Limited,
	}
}

// inFlightOf is the concurrency an entry of a pod's own report says, each figure within
// the schema's bound (again for a report stored before it).
func inFlightOf(e *resiliencev1alpha1.BreakerReportEntry) InFlight {
	var f InFlight
	if e.InFlightPeak != nil {
		f.Peak = count(*e.InFlightPeak, breakerconfig.MaxInFlight)
	}
	if e.Limited != nil {
		f.Limited = count(*e.Limited, breakerconfig.MaxTrafficCount)
	}
	f.Baseline = apiBaseline(e.Baseline)
	return f
}

// apiBaseline is a reported baseline within [0, MaxBaseline]; 0 for none.
func apiBaseline(d *metav1.Duration) time.Duration {
	if d == nil {
		return 0
	}
	return time.Duration(count(int64(d.Duration), int64(breakerconfig.MaxBaseline)))
}
