package controller

import (
	"cmp"
	"math"
	"math/bits"
	"math/rand/v2"
	"time"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// The fleet's traffic (docs/design.md §4, §5.15–§5.17): for a breaker with a retry budget
// or adaptive throttling, each pod reports what its window holds; the operator publishes in
// the rendered config (fleet) what the pods act on, and shows in status.traffic what the
// fleet sent. One pod, one share: a pod's report is its own word, so no figure is a sum
// that one pod can inflate.
//
//   - fleet.pods counts the running pods that report the breaker, each once.
//   - fleet.requests and fleet.accepts are the window of one reporting pod: the median
//     pod by the rejection probability its window makes (§5.16), the lower of the two
//     middle ones of an even count. A quiet pod that throttles on them refuses calls as
//     that pod does, and fewer than half of the pods, whatever they report, cannot take
//     its probability outside the range the other pods' windows span.
//   - status.traffic adds the windows up, each made consistent first (accepts, retries
//     and throttled at most its requests) and scaled down, when its requests pass
//     maxShareOfMedian times the median pod's (or minimumThroughput, if more), to that
//     bound: no pod counts for more than a bounded share of the sums or their ratios.

// minFleetInterval is how often a change of the published fleet counts alone is written
// into the ConfigMap: every pod of the namespace reads each write, and the counts move
// with every pod's traffic report.
const minFleetInterval = time.Second

// maxShareOfMedian is how many times the median reporting pod's requests one pod's
// window counts for at most in status.traffic. Pods behind one Service see about the same
// traffic; a pod a few times busier than the median (a hot connection, a slow start of
// the others) still counts in full.
const maxShareOfMedian = 4

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

// window is one pod's traffic as the operator counts it.
type window struct {
	requests, accepts, retries, throttled int64
}

// fleetTraffic is what the operator makes of a breaker's members' windows.
type fleetTraffic struct {
	pods int
	// requests, accepts, retries and throttled are the sums of status.traffic.
	requests, accepts, retries, throttled int64
	// median is the window published as fleet.requests and fleet.accepts: its
	// requests and accepts, no more.
	median window
}

// windowOf is the traffic an entry reports, consistent whatever the report says: each
// count within [0, MaxTrafficCount] (the schema's bound, again for a report stored before
// it), a count left out is 0, and accepts, retries and throttled, which are among the
// requests, at most the requests (the schema's rule too, for the same reports).
func windowOf(e *resiliencev1alpha1.BreakerReportEntry) window {
	count := func(n *int64) int64 {
		if n == nil {
			return 0
		}
		return min(max(*n, 0), breakerconfig.MaxTrafficCount)
	}
	w := window{requests: count(e.Requests)}
	w.accepts, w.retries, w.throttled = min(count(e.Accepts), w.requests), min(count(e.Retries), w.requests), min(count(e.Throttled), w.requests)
	return w
}

// trafficOf is the fleet's traffic for cb's members (see the rules above). Every running
// pod that reports the breaker counts as one of its pods, as the fleet verdict counts
// them (§5.12); one that reports no traffic counts as an empty window.
func trafficOf(cb *resiliencev1alpha1.CircuitBreaker, members []member) fleetTraffic {
	t := fleetTraffic{pods: len(members)}
	if len(members) == 0 {
		return t
	}
	k := throttleK(cb)
	ranked := make([]rankedWindow, len(members))
	for i := range members {
		w := windowOf(&members[i].entry)
		ranked[i] = rankedWindow{rejection(w, k), w.requests, w.accepts}
	}
	// Of an even count the lower middle one: throttling refuses calls, and half of the
	// pods must not decide that alone.
	m := nth(ranked, (len(ranked)-1)/2, compareRanked)
	t.median = window{requests: m.requests, accepts: m.accepts}
	// The upper median of the requests (the same windows, reordered): with half the pods
	// idle, the busy half still counts in full.
	typical := nth(ranked, len(ranked)/2, func(a, b rankedWindow) int { return cmp.Compare(a.requests, b.requests) }).requests
	bound := maxShareOfMedian * max(typical, int64(int32Or(cb.Spec.MinimumThroughput, resiliencev1alpha1.DefaultMinimumThroughput)))
	add := func(sum *int64, n int64) { *sum = min(*sum+n, maxFleetCount) }
	for i := range members {
		w := windowOf(&members[i].entry).scaledTo(bound)
		add(&t.requests, w.requests)
		add(&t.accepts, w.accepts)
		add(&t.retries, w.retries)
		add(&t.throttled, w.throttled)
	}
	return t
}

// rankedWindow is a window as the published one is chosen: by the rejection probability
// it makes, then by the most requests (the more evidence), then the fewest accepts.
// Windows equal in all three publish the same figures, so the choice does not depend on
// the order the members come in.
type rankedWindow struct {
	p                 float64
	requests, accepts int64
}

// compareRanked orders windows as rankedWindow says, with early returns: cmp.Or would
// compare all three fields every time, and 5,000 pods' windows make some 15,000 comparisons
// per choice.
func compareRanked(a, b rankedWindow) int {
	if c := cmp.Compare(a.p, b.p); c != 0 {
		return c
	}
	if c := cmp.Compare(b.requests, a.requests); c != 0 {
		return c
	}
	return cmp.Compare(a.accepts, b.accepts)
}

// nth returns the element a sort of xs by compare would put at index n, and leaves xs
// reordered: Hoare's selection, in expected linear time whatever the input, since its
// pivots are drawn at random (the reports choose the input), and partitioned three ways,
// since many pods report the same figures.
func nth[T any](xs []T, n int, compare func(a, b T) int) T {
	lo, hi := 0, len(xs)-1
	for lo < hi {
		pivot := xs[lo+rand.IntN(hi-lo+1)]
		// [lo, lt) before the pivot, [lt, i) equal to it, (gt, hi] after it.
		lt, i, gt := lo, lo, hi
		for i <= gt {
			switch c := compare(xs[i], pivot); {
			case c < 0:
				xs[lt], xs[i] = xs[i], xs[lt]
				lt++
				i++
			case c > 0:
				xs[i], xs[gt] = xs[gt], xs[i]
				gt--
			default:
				i++
			}
		}
		switch {
		case n < lt:
			hi = lt - 1
		case n > gt:
			lo = gt + 1
		default:
			return xs[n]
		}
	}
	return xs[n]
}

// maxFleetCount caps a fleet sum: the largest count a JSON reader that holds numbers as
// doubles reads exactly, far below where an int64 sum of bounded counts could wrap.
const maxFleetCount = 1<<53 - 1

// scaledTo returns w with its requests at most bound, and its other counts scaled in
// proportion, exactly (rounded down) in 128 bits: a count times a bound can pass int64.
func (w window) scaledTo(bound int64) window {
	if w.requests <= bound {
		return w
	}
	scale := func(n int64) int64 {
		hi, lo := bits.Mul64(uint64(n), uint64(bound))
		q, _ := bits.Div64(hi, lo, uint64(w.requests)) // n ≤ requests: q ≤ bound, no overflow
		return int64(q)
	}
	return window{requests: bound, accepts: scale(w.accepts), retries: scale(w.retries), throttled: scale(w.throttled)}
}

// throttleK is the k the pods throttle with: the spec's, else its default. A breaker with
// a retry budget alone throttles nothing, and its published window is ranked by the
// default k.
func throttleK(cb *resiliencev1alpha1.CircuitBreaker) float64 {
	if t := cb.Spec.Throttle; t != nil && t.K != nil {
		return *t.K
	}
	return resiliencev1alpha1.DefaultThrottleK
}

// rejection is the probability adaptive throttling refuses a call with over window w
// (docs/design.md §5.16): max(0, (requests − k × accepts) / (requests + 1)), the formula
// of pkg/breaker's throttle.go.
func rejection(w window, k float64) float64 {
	r := float64(w.requests)
	return max(0, (r-k*float64(w.accepts))/(r+1))
}

// renderFleetPolicies adds the retry budget, the throttle and, with either, the fleet
// counts to c. Fields the API server did not default get the documented defaults.
func renderFleetPolicies(c *breakerconfig.Config, s resiliencev1alpha1.CircuitBreakerSpec, traffic fleetTraffic) {
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
		c.Fleet = &breakerconfig.Fleet{Pods: traffic.pods, Requests: traffic.median.requests, Accepts: traffic.median.accepts}
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

// statusTraffic is status.traffic for t: the sums, and their ratios in whole percent,
// each within [0, 100].
func statusTraffic(t fleetTraffic) *resiliencev1alpha1.FleetTraffic {
	st := &resiliencev1alpha1.FleetTraffic{
		Pods:     saturated(int64(t.pods)),
		Requests: t.requests, Accepts: t.accepts, Retries: t.retries, Throttled: t.throttled,
	}
	// A retry is a request too: the first attempts are the rest. The budget's floor may
	// allow more retries than first attempts, which shows as 100.
	if first := t.requests - t.retries; first > 0 {
		st.RetryPercent = roundPercent(min(t.retries, first), first)
	}
	if t.requests > 0 {
		st.ThrottledPercent = roundPercent(t.throttled, t.requests)
	}
	return st
}

// roundPercent is n of total in whole percent, rounded; 0 ≤ n ≤ total.
func roundPercent(n, total int64) *int32 {
	v := int32(math.Round(100 * float64(n) / float64(total)))
	return &v
}
