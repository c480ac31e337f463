package counting

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"k8s.io/utils/ptr"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// The fleet's traffic (docs/design.md §5.15–§5.17) over pods that each report on their own.

// Every running pod counts, reporting traffic or not; each count is bounded by the
// report's bound and by the pod's own requests, and 5,000 pods at the bound neither
// overflow nor lose exactness.
func TestTrafficOf(t *testing.T) {
	n := ptr.To[int64]
	cb := throttled(2)
	got := TrafficOf(cb, entriesOf(
		trafficMember("a", n(100), n(50), n(10), n(20)),
		trafficMember("b", n(200), n(100), n(20), n(30)),
		trafficMember("c", nil, nil, nil, nil),
		trafficMember("d", n(-7), n(math.MaxInt64), nil, nil),
	))
	// Every window's p is 0 at k = 2 (c's and d's are empty): ties go to the most
	// requests, and the lower middle of four is the second, a's.
	want := FleetTraffic{Pods: 4, Requests: 300, Accepts: 150, Retries: 30, Throttled: 50, Median: Window{Requests: 100, Accepts: 50}}
	if got != want {
		t.Errorf("traffic %+v, want %+v", got, want)
	}
	many := make([]member, 5000)
	for i := range many {
		many[i] = trafficMember("p", n(math.MaxInt64), n(breakerconfig.MaxTrafficCount), n(breakerconfig.MaxTrafficCount), n(0))
	}
	got = TrafficOf(cb, entriesOf(many...))
	if got.Requests != 5000*breakerconfig.MaxTrafficCount || got.Accepts != got.Requests || got.Pods != 5000 || got.Requests > maxFleetCount {
		t.Errorf("5,000 pods at the bound: %+v", got)
	}
	if got.Median != (Window{Requests: breakerconfig.MaxTrafficCount, Accepts: breakerconfig.MaxTrafficCount}) {
		t.Errorf("5,000 pods at the bound publish %+v", got.Median)
	}
	if got := TrafficOf(cb, nil); got != (FleetTraffic{}) {
		t.Errorf("no pods: %+v", got)
	}
}

// What a report says is made consistent before it counts: the issue 29 report of
// accepts far above requests, stored before the schema refused it, accepts no more than
// its requests.
func TestWindowOfMakesAReportConsistent(t *testing.T) {
	n := ptr.To[int64]
	for _, tc := range []struct {
		name string
		e    member
		want Window
	}{
		{"consistent", trafficMember("a", n(10), n(4), n(2), n(1)), Window{10, 4, 2, 1}},
		{"accepts far above requests", trafficMember("a", n(10), n(1_000_000), nil, nil), Window{10, 10, 0, 0}},
		{"retries and throttled above requests", trafficMember("a", n(10), nil, n(11), n(12)), Window{10, 0, 10, 10}},
		{"counts without requests", trafficMember("a", nil, n(5), n(5), n(5)), Window{}},
		{"negative", trafficMember("a", n(-1), n(-1), n(-1), n(-1)), Window{}},
		{"past the schema's bound", trafficMember("a", n(math.MaxInt64), n(math.MaxInt64), n(0), n(0)), Window{breakerconfig.MaxTrafficCount, breakerconfig.MaxTrafficCount, 0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := windowOf(&tc.e.entry); got != tc.want {
				t.Errorf("window %+v, want %+v", got, tc.want)
			}
			if got := entriesOf(tc.e)[0].Traffic; got != tc.want {
				t.Errorf("FromPod's window %+v, want %+v", got, tc.want)
			}
		})
	}
}

// A pod's window counts in status.traffic at most maxShareOfMedian times the upper median
// pod's requests (and at least that many times minimumThroughput), scaled in proportion;
// below that bound, in full.
func TestTrafficCountsABoundedShare(t *testing.T) {
	n := ptr.To[int64]
	cb := throttled(2)
	fleet := entriesOf(
		trafficMember("a", n(1000), n(900), n(100), n(0)),
		trafficMember("b", n(1000), n(900), n(100), n(0)),
		trafficMember("c", n(3000), n(2700), n(300), n(0)), // three times the median: in full
		trafficMember("rogue", n(breakerconfig.MaxTrafficCount), n(breakerconfig.MaxTrafficCount/2), n(breakerconfig.MaxTrafficCount), n(breakerconfig.MaxTrafficCount/4)),
	)
	got := TrafficOf(cb, fleet)
	// The upper median of 1000, 1000, 3000, 10^12 is 3000: the rogue counts as 12000
	// requests, with its own shares of them.
	if got.Requests != 5000+12000 || got.Accepts != 4500+6000 || got.Retries != 500+12000 || got.Throttled != 3000 {
		t.Errorf("sums %+v", got)
	}
	// A quiet fleet's bound is minimumThroughput's: 4 × 20.
	quiet := entriesOf(trafficMember("a", n(3), n(3), nil, nil), trafficMember("b", n(2), n(2), nil, nil), trafficMember("rogue", n(1e9), n(0), nil, nil))
	if got := TrafficOf(cb, quiet); got.Requests != 5+80 || got.Accepts != 5 {
		t.Errorf("quiet fleet: %+v", got)
	}
	// Half the pods idle: the busy half counts in full.
	half := entriesOf(trafficMember("a", n(0), nil, nil, nil), trafficMember("b", n(5000), n(5000), nil, nil))
	if got := TrafficOf(cb, half); got.Requests != 5000 {
		t.Errorf("half idle: %+v", got)
	}
	if w := (Window{Requests: 7, Accepts: 5, Retries: 3, Throttled: 1}).scaledTo(3); w != (Window{3, 2, 1, 0}) {
		t.Errorf("scaled %+v", w)
	}
	big := Window{Requests: breakerconfig.MaxTrafficCount, Accepts: breakerconfig.MaxTrafficCount - 1}
	if w := big.scaledTo(breakerconfig.MaxTrafficCount - 1); w.Accepts != breakerconfig.MaxTrafficCount-2 {
		t.Errorf("scaled without overflow: %+v", w)
	}
}

// Issue 29's measure of done: with one pod of ten reporting anything the schema admits
// (or anything a report stored before its rules holds), the rejection probability of
// every quiet pod, which throttles on the published window, stays within the range of the
// nine honest pods' own windows, and the pod counts in status.traffic for at most
// maxShareOfMedian times a requests count some honest pod reports.
func TestOnePodOfTenCannotMoveAQuietPodsThrottling(t *testing.T) {
	rnd := rand.New(rand.NewPCG(29, 10))
	n := ptr.To[int64]
	// honestWindow is a pod's real window: quiet or busy, its dependency accepting
	// anything from none to all of it.
	honestWindow := func() (int64, int64) {
		var requests int64
		switch rnd.IntN(3) {
		case 0:
			requests = rnd.Int64N(30) // quiet: a new replica, a restarted pod
		case 1:
			requests = rnd.Int64N(2000)
		default:
			requests = rnd.Int64N(1_000_000)
		}
		return requests, rnd.Int64N(requests + 1)
	}
	// anyCount is any count up to the schema's bound, extremes often.
	anyCount := func() int64 {
		switch rnd.IntN(5) {
		case 0:
			return 0
		case 1:
			return breakerconfig.MaxTrafficCount
		case 2:
			return rnd.Int64N(100)
		default:
			return rnd.Int64N(breakerconfig.MaxTrafficCount + 1)
		}
	}
	maybe := func(v int64) *int64 {
		if rnd.IntN(8) == 0 {
			return nil
		}
		return n(v)
	}
	for run := range 20_000 {
		k := []float64{1, 1.5, 2, 10, 1 + 9*rnd.Float64()}[rnd.IntN(5)]
		cb := throttled(k)
		members := make([]member, 0, 10)
		lo, hi := 1.0, 0.0
		var honestRequests []int64
		var honestSum int64
		for i := range 9 {
			requests, accepts := honestWindow()
			members = append(members, trafficMember(fmt.Sprintf("honest-%d", i), n(requests), n(accepts), n(rnd.Int64N(requests+1)), n(0)))
			p := Rejection(Window{Requests: requests, Accepts: accepts}, k)
			lo, hi = min(lo, p), max(hi, p)
			honestRequests = append(honestRequests, requests)
			honestSum += requests
		}
		requests := anyCount()
		accepts := rnd.Int64N(requests + 1)
		switch rnd.IntN(4) {
		case 0:
			accepts = anyCount() // a report stored before accepts ≤ requests
		case 1:
			accepts = requests
		}
		liar := trafficMember("liar", maybe(requests), maybe(accepts), maybe(anyCount()), maybe(anyCount()))
		at := rnd.IntN(len(members) + 1)
		members = slices.Insert(members, at, liar)

		got := TrafficOf(cb, entriesOf(members...))
		if p := Rejection(got.Median, k); p < lo || p > hi {
			t.Fatalf("run %d, k %v: a quiet pod refuses with p %v on %+v, outside the honest pods' [%v, %v]; the liar reported %+v",
				run, k, p, got.Median, lo, hi, windowOf(&liar.entry))
		}
		slices.Sort(honestRequests)
		bound := maxShareOfMedian * max(honestRequests[len(honestRequests)-1], 20)
		if got.Requests > honestSum+bound || got.Accepts > got.Requests || got.Retries > got.Requests || got.Throttled > got.Requests {
			t.Fatalf("run %d: sums %+v from honest requests %d; the liar counts for more than %d", run, got, honestSum, bound)
		}
		st := StatusTraffic(got)
		for _, pc := range []*int32{st.RetryPercent, st.ThrottledPercent} {
			if pc != nil && (*pc < 0 || *pc > 100) {
				t.Fatalf("run %d: a percentage of %d in %+v", run, *pc, st)
			}
		}
	}
}

// nthWeighted picks what a sort of the pods would put at the index, each item standing for
// its weight in pods, for inputs with and without ties; with weight 1 it is the plain
// order statistic the per-pod operator took.
func TestNthWeightedIsWhatASortPicks(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	for run := range 4000 {
		xs := make([]weighted[int64], 1+rnd.IntN(60))
		spread := []int64{1, 3, 1000}[run%3] // all equal, many ties, few
		var pods []int64
		for i := range xs {
			w := int64(1)
			if run%2 == 1 {
				w = 1 + rnd.Int64N(5)
			}
			xs[i] = weighted[int64]{rnd.Int64N(spread), w}
			for range w {
				pods = append(pods, xs[i].value)
			}
		}
		slices.Sort(pods)
		n := rnd.Int64N(int64(len(pods)))
		if got := nthWeighted(slices.Clone(xs), n, cmp.Compare[int64]); got != pods[n] {
			t.Fatalf("nthWeighted(%v, %d) = %d, want %d", xs, n, got, pods[n])
		}
		if lo, hi := lowerMedian(slices.Clone(xs), cmp.Compare[int64]), upperMedian(slices.Clone(xs), cmp.Compare[int64]); lo != pods[(len(pods)-1)/2] || hi != pods[len(pods)/2] {
			t.Fatalf("medians of %v: %d and %d, want %d and %d", pods, lo, hi, pods[(len(pods)-1)/2], pods[len(pods)/2])
		}
	}
	if got := lowerMedian([]weighted[int64]{}, cmp.Compare[int64]); got != 0 {
		t.Errorf("median of no pods: %d", got)
	}
}

func TestStatusTraffic(t *testing.T) {
	for _, tc := range []struct {
		name               string
		sums               FleetTraffic
		retry, throttledPc *int32
	}{
		{"ratios", FleetTraffic{Pods: 3, Requests: 300, Accepts: 150, Retries: 30, Throttled: 50}, ptr.To[int32](11), ptr.To[int32](17)},
		{"no traffic", FleetTraffic{Pods: 2}, nil, nil},
		{"retries only", FleetTraffic{Pods: 1, Requests: 4, Retries: 4}, nil, ptr.To[int32](0)},
		{"floor beyond first attempts shows 100", FleetTraffic{Pods: 1, Requests: 30, Retries: 20}, ptr.To[int32](100), ptr.To[int32](0)},
		{"issue 29: requests and retries near 10^12", FleetTraffic{Pods: 1, Requests: breakerconfig.MaxTrafficCount, Retries: breakerconfig.MaxTrafficCount - 1}, ptr.To[int32](100), ptr.To[int32](0)},
		{"all throttled", FleetTraffic{Pods: 1, Requests: 10, Throttled: 10}, ptr.To[int32](0), ptr.To[int32](100)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := StatusTraffic(tc.sums)
			if got.Pods != int32(tc.sums.Pods) || got.Requests != tc.sums.Requests || got.Throttled != tc.sums.Throttled {
				t.Errorf("counts %+v from %+v", got, tc.sums)
			}
			if !ptrEqual(got.RetryPercent, tc.retry) || !ptrEqual(got.ThrottledPercent, tc.throttledPc) {
				t.Errorf("retryPercent %v throttledPercent %v, want %v %v", deref(got.RetryPercent), deref(got.ThrottledPercent), deref(tc.retry), deref(tc.throttledPc))
			}
		})
	}
}
