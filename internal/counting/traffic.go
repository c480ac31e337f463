package counting

import (
	"cmp"
	"math"

	"k8s.io/utils/ptr"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// The fleet's traffic (docs/design.md §4, §5.15–§5.17): for a breaker with a retry budget
// or adaptive throttling, each pod reports what its window holds, and a node's entry the
// windows of its pods added up, each pod's bounded first by the node's agent. The
// operator publishes in the rendered config (fleet) what the pods act on, and shows in
// status.traffic what the fleet sent. One pod, one share: no figure is a sum one carrier
// can inflate.
//
//   - fleet.pods counts the running pods that report the breaker, each once.
//   - fleet.requests and fleet.accepts are the window of one typical pod: the median pod by
//     the rejection probability its window makes (§5.16), the lower of the two middle ones
//     of an even count, each carrier's pods taken as its average pod. A quiet pod that
//     throttles on them refuses calls as that pod does, and carriers of fewer than half
//     of the pods, whatever they report, cannot take its probability outside the range
//     the others' windows span.
//   - status.traffic adds the windows up, each carrier's scaled down, when its requests
//     per pod pass maxShareOfMedian times the median pod's (or minimumThroughput, if
//     more), to that bound.

// UsesTraffic says whether cb's pods report their traffic and read the fleet's.
func UsesTraffic(cb *resiliencev1alpha1.CircuitBreaker) bool {
	return cb.Spec.RetryBudget != nil || cb.Spec.Throttle != nil
}

// FleetTraffic is what the operator makes of a breaker's entries' windows.
type FleetTraffic struct {
	Pods int64
	// Requests, Accepts, Retries and Throttled are the sums of status.traffic.
	Requests, Accepts, Retries, Throttled int64
	// Median is the window published as fleet.requests and fleet.accepts: its requests
	// and accepts, no more.
	Median Window
}

// maxFleetCount caps a fleet sum: the largest count a JSON reader that holds numbers as
// doubles reads exactly, far below where an int64 sum of bounded counts could wrap.
const maxFleetCount = 1<<53 - 1

// rankedWindow is a pod's window as the published one is chosen: by the rejection
// probability it makes, then by the most requests (the more evidence), then the fewest
// accepts. Windows equal in all three publish the same figures, so the choice does not
// depend on the order the entries come in.
type rankedWindow struct {
	p                 float64
	requests, accepts int64
}

func compareRanked(a, b rankedWindow) int {
	if c := cmp.Compare(a.p, b.p); c != 0 {
		return c
	}
	if c := cmp.Compare(b.requests, a.requests); c != 0 {
		return c
	}
	return cmp.Compare(a.accepts, b.accepts)
}

// TrafficOf is the fleet's traffic over cb's entries (see the rules above). Every running
// pod that reports the breaker counts as one of its pods, as the fleet verdict counts
// them (§5.12); one that reports no traffic counts as an empty window.
func TrafficOf(cb *resiliencev1alpha1.CircuitBreaker, entries []Entry) FleetTraffic {
	var t FleetTraffic
	k := ThrottleK(cb)
	ranked := make([]weighted[rankedWindow], 0, len(entries))
	requests := make([]weighted[int64], 0, len(entries))
	for i := range entries {
		e := &entries[i]
		if e.Pods <= 0 {
			continue
		}
		t.Pods += e.Pods
		avg := Window{Requests: e.Traffic.Requests / e.Pods, Accepts: e.Traffic.Accepts / e.Pods}
		ranked = append(ranked, weighted[rankedWindow]{rankedWindow{Rejection(avg, k), avg.Requests, avg.Accepts}, e.Pods})
		requests = append(requests, weighted[int64]{e.Traffic.Requests, e.Pods})
	}
	if t.Pods == 0 {
		return t
	}
	// Of an even count the lower middle one: throttling refuses calls, and half of the
	// pods must not decide that alone.
	m := lowerMedian(ranked, compareRanked)
	t.Median = Window{Requests: m.requests, Accepts: m.accepts}
	// The upper median of the requests per pod: with half the pods idle, the busy half
	// still counts in full.
	perPod := make([]weighted[int64], len(requests))
	for i, r := range requests {
		perPod[i] = weighted[int64]{r.value / r.weight, r.weight}
	}
	typical := upperMedian(perPod, compareInt64)
	bound := maxShareOfMedian * max(typical, int64(ptr.Deref(cb.Spec.MinimumThroughput, resiliencev1alpha1.DefaultMinimumThroughput)))
	add := func(sum *int64, n int64) { *sum = min(*sum+n, maxFleetCount) }
	for i := range entries {
		e := &entries[i]
		w := e.Traffic.scaledTo(mulSat(bound, max(e.Pods, 0)))
		add(&t.Requests, w.Requests)
		add(&t.Accepts, w.Accepts)
		add(&t.Retries, w.Retries)
		add(&t.Throttled, w.Throttled)
	}
	return t
}

// scaledTo returns w with its requests at most bound, and its other counts scaled in
// proportion, exactly (rounded down).
func (w Window) scaledTo(bound int64) Window {
	if w.Requests <= bound {
		return w
	}
	return Window{
		Requests: bound, Accepts: mulDiv(w.Accepts, bound, w.Requests),
		Retries: mulDiv(w.Retries, bound, w.Requests), Throttled: mulDiv(w.Throttled, bound, w.Requests),
	}
}

// ThrottleK is the k the pods throttle with: the spec's, else its default. A breaker with a
// retry budget alone throttles nothing, and its published window is ranked by the default
// k.
func ThrottleK(cb *resiliencev1alpha1.CircuitBreaker) float64 {
	if t := cb.Spec.Throttle; t != nil && t.K != nil {
		return *t.K
	}
	return resiliencev1alpha1.DefaultThrottleK
}

// Rejection is the probability adaptive throttling refuses a call with over window w
// (docs/design.md §5.16): max(0, (requests − k × accepts) / (requests + 1)), the formula
// of pkg/breaker's throttle.go.
func Rejection(w Window, k float64) float64 {
	r := float64(w.Requests)
	return max(0, (r-k*float64(w.Accepts))/(r+1))
}

// StatusTraffic is status.traffic for t: the sums, and their ratios in whole percent,
// each within [0, 100].
func StatusTraffic(t FleetTraffic) *resiliencev1alpha1.FleetTraffic {
	st := &resiliencev1alpha1.FleetTraffic{
		Pods:     saturated(t.Pods),
		Requests: t.Requests, Accepts: t.Accepts, Retries: t.Retries, Throttled: t.Throttled,
	}
	// A retry is a request too: the first attempts are the rest. The budget's floor may
	// allow more retries than first attempts, which shows as 100.
	if first := t.Requests - t.Retries; first > 0 {
		st.RetryPercent = roundPercent(min(t.Retries, first), first)
	}
	if t.Requests > 0 {
		st.ThrottledPercent = roundPercent(t.Throttled, t.Requests)
	}
	return st
}

// roundPercent is n of total in whole percent, rounded; 0 ≤ n ≤ total.
func roundPercent(n, total int64) *int32 {
	v := int32(math.Round(100 * float64(n) / float64(total)))
	return &v
}

// percentOf is n in percent of of, rounded, within [0, 100]; of > 0 and 0 ≤ n ≤ of.
func percentOf(n, of int64) *int32 {
	// In float64: n × 100 can pass int64 at the counts' bound.
	p := int32(min(100, max(0, float64(n)*100/float64(of)+0.5)))
	return &p
}
