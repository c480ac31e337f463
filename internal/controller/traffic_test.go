package controller

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/kube"
)

// The wire format of the fleet policies (docs/design.md §4): k a JSON number, and the
// fleet counts beside them.
func TestRenderTheFleetPolicies(t *testing.T) {
	cb := &resiliencev1alpha1.CircuitBreaker{
		ObjectMeta: metav1.ObjectMeta{Name: "payments-api", Generation: 2},
		Spec: resiliencev1alpha1.CircuitBreakerSpec{
			RetryBudget: &resiliencev1alpha1.RetryBudget{Percent: ptr.To[int32](25), MinPerSecond: ptr.To[int32](40)},
			Throttle:    &resiliencev1alpha1.Throttle{K: ptr.To(1.5)},
		},
	}
	c, err := render(cb, nil, fleetTraffic{pods: 200, requests: 1 << 40, accepts: 1 << 39, retries: 9, throttled: 7, median: window{requests: 12345, accepts: 6000}})
	if err != nil {
		t.Fatal(err)
	}
	doc, err := breakerconfig.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	want := `{
  "name": "payments-api",
  "generation": 2,
  "openTimeout": "30s",
  "window": "10s",
  "failureRatio": 0.5,
  "minimumThroughput": 20,
  "successThreshold": 2,
  "halfOpenPermittedCalls": 1,
  "mode": "Enforce",
  "scope": "Pod",
  "retryBudget": {
    "percent": 25,
    "minPerSecond": 40
  },
  "throttle": {
    "k": 1.5
  },
  "fleet": {
    "pods": 200,
    "requests": 12345,
    "accepts": 6000
  }
}`
	if string(doc) != want {
		t.Errorf("rendered\n%s\nwant\n%s", doc, want)
	}
	back, err := breakerconfig.Parse(doc)
	if err != nil {
		t.Fatalf("the pods refuse what the operator renders: %v", err)
	}
	p, err := kube.PolicyOf(back)
	if err != nil || p.RetryBudget == nil || *p.RetryBudget != (struct{ Percent, MinPerSecond int }{25, 40}) || p.Throttle == nil || p.Throttle.K != 1.5 {
		t.Errorf("policy read back: %+v, %v", p, err)
	}

	// Unset fields of a stored object get their defaults; with neither policy there is no fleet.
	c, err = render(&resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: resiliencev1alpha1.CircuitBreakerSpec{
		RetryBudget: &resiliencev1alpha1.RetryBudget{}, Throttle: &resiliencev1alpha1.Throttle{}}}, nil, fleetTraffic{pods: 3})
	if err != nil || *c.RetryBudget != (breakerconfig.RetryBudget{Percent: 20, MinPerSecond: 10}) || c.Throttle.K != 2 || *c.Fleet != (breakerconfig.Fleet{Pods: 3}) {
		t.Errorf("defaults: %+v %+v %+v, %v", c.RetryBudget, c.Throttle, c.Fleet, err)
	}
	c, err = render(&resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, nil, fleetTraffic{pods: 3, requests: 5, median: window{requests: 5}})
	if err != nil || c.Fleet != nil || c.RetryBudget != nil || c.Throttle != nil {
		t.Errorf("a breaker with neither policy rendered %+v, %v", c, err)
	}
}

func trafficMember(pod string, requests, accepts, retries, throttled *int64) member {
	return member{pod: pod, entry: resiliencev1alpha1.BreakerReportEntry{Name: "b", State: resiliencev1alpha1.StateClosed,
		Requests: requests, Accepts: accepts, Retries: retries, Throttled: throttled}}
}

// Every running pod counts, reporting traffic or not; each count is bounded by the
// report's bound and by the pod's own requests, and 5,000 pods at the bound neither
// overflow nor lose exactness.
func TestTrafficOf(t *testing.T) {
	n := ptr.To[int64]
	cb := throttled(2)
	got := trafficOf(cb, []member{
		trafficMember("a", n(100), n(50), n(10), n(20)),
		trafficMember("b", n(200), n(100), n(20), n(30)),
		trafficMember("c", nil, nil, nil, nil),
		trafficMember("d", n(-7), n(math.MaxInt64), nil, nil),
	})
	// Every window's p is 0 at k = 2 (c's and d's are empty): ties go to the most
	// requests, and the lower middle of four is the second, a's.
	want := fleetTraffic{pods: 4, requests: 300, accepts: 150, retries: 30, throttled: 50, median: window{requests: 100, accepts: 50}}
	if got != want {
		t.Errorf("traffic %+v, want %+v", got, want)
	}
	many := make([]member, 5000)
	for i := range many {
		many[i] = trafficMember("p", n(math.MaxInt64), n(breakerconfig.MaxTrafficCount), n(breakerconfig.MaxTrafficCount), n(0))
	}
	got = trafficOf(cb, many)
	if got.requests != 5000*breakerconfig.MaxTrafficCount || got.accepts != got.requests || got.pods != 5000 || got.requests > maxFleetCount {
		t.Errorf("5,000 pods at the bound: %+v", got)
	}
	if got.median != (window{requests: breakerconfig.MaxTrafficCount, accepts: breakerconfig.MaxTrafficCount}) {
		t.Errorf("5,000 pods at the bound publish %+v", got.median)
	}
	if got := trafficOf(cb, nil); got != (fleetTraffic{}) {
		t.Errorf("no pods: %+v", got)
	}
}

// throttled is a breaker with adaptive throttling at k.
func throttled(k float64) *resiliencev1alpha1.CircuitBreaker {
	return &resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "b", Generation: 1},
		Spec: resiliencev1alpha1.CircuitBreakerSpec{Throttle: &resiliencev1alpha1.Throttle{K: ptr.To(k)}}}
}

// What a report says is made consistent before it counts: the issue 29 report of
// accepts far above requests, stored before the schema refused it, accepts no more than
// its requests.
func TestWindowOfMakesAReportConsistent(t *testing.T) {
	n := ptr.To[int64]
	for _, tc := range []struct {
		name string
		e    member
		want window
	}{
		{"consistent", trafficMember("a", n(10), n(4), n(2), n(1)), window{10, 4, 2, 1}},
		{"accepts far above requests", trafficMember("a", n(10), n(1_000_000), nil, nil), window{10, 10, 0, 0}},
		{"retries and throttled above requests", trafficMember("a", n(10), nil, n(11), n(12)), window{10, 0, 10, 10}},
		{"counts without requests", trafficMember("a", nil, n(5), n(5), n(5)), window{}},
		{"negative", trafficMember("a", n(-1), n(-1), n(-1), n(-1)), window{}},
		{"past the schema's bound", trafficMember("a", n(math.MaxInt64), n(math.MaxInt64), n(0), n(0)), window{breakerconfig.MaxTrafficCount, breakerconfig.MaxTrafficCount, 0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := windowOf(&tc.e.entry); got != tc.want {
				t.Errorf("window %+v, want %+v", got, tc.want)
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
	fleet := []member{
		trafficMember("a", n(1000), n(900), n(100), n(0)),
		trafficMember("b", n(1000), n(900), n(100), n(0)),
		trafficMember("c", n(3000), n(2700), n(300), n(0)), // three times the median: in full
		trafficMember("rogue", n(breakerconfig.MaxTrafficCount), n(breakerconfig.MaxTrafficCount/2), n(breakerconfig.MaxTrafficCount), n(breakerconfig.MaxTrafficCount/4)),
	}
	got := trafficOf(cb, fleet)
	// The upper median of 1000, 1000, 3000, 10^12 is 3000: the rogue counts as 12000
	// requests, with its own shares of them.
	if got.requests != 5000+12000 || got.accepts != 4500+6000 || got.retries != 500+12000 || got.throttled != 3000 {
		t.Errorf("sums %+v", got)
	}
	// A quiet fleet's bound is minimumThroughput's: 4 × 20.
	quiet := []member{trafficMember("a", n(3), n(3), nil, nil), trafficMember("b", n(2), n(2), nil, nil), trafficMember("rogue", n(1e9), n(0), nil, nil)}
	if got := trafficOf(cb, quiet); got.requests != 5+80 || got.accepts != 5 {
		t.Errorf("quiet fleet: %+v", got)
	}
	// Half the pods idle: the busy half counts in full.
	half := []member{trafficMember("a", n(0), nil, nil, nil), trafficMember("b", n(5000), n(5000), nil, nil)}
	if got := trafficOf(cb, half); got.requests != 5000 {
		t.Errorf("half idle: %+v", got)
	}
	if w := (window{requests: 7, accepts: 5, retries: 3, throttled: 1}).scaledTo(3); w != (window{3, 2, 1, 0}) {
		t.Errorf("scaled %+v", w)
	}
	big := window{requests: breakerconfig.MaxTrafficCount, accepts: breakerconfig.MaxTrafficCount - 1}
	if w := big.scaledTo(breakerconfig.MaxTrafficCount - 1); w.accepts != breakerconfig.MaxTrafficCount-2 {
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
			p := rejection(window{requests: requests, accepts: accepts}, k)
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
		members = append(members[:at], append([]member{liar}, members[at:]...)...)

		got := trafficOf(cb, members)
		if p := rejection(got.median, k); p < lo || p > hi {
			t.Fatalf("run %d, k %v: a quiet pod refuses with p %v on %+v, outside the honest pods' [%v, %v]; the liar reported %+v",
				run, k, p, got.median, lo, hi, windowOf(&liar.entry))
		}
		slices.Sort(honestRequests)
		bound := maxShareOfMedian * max(honestRequests[len(honestRequests)-1], 20)
		if got.requests > honestSum+bound || got.accepts > got.requests || got.retries > got.requests || got.throttled > got.requests {
			t.Fatalf("run %d: sums %+v from honest requests %d; the liar counts for more than %d", run, got, honestSum, bound)
		}
		st := statusTraffic(got)
		for _, pc := range []*int32{st.RetryPercent, st.ThrottledPercent} {
			if pc != nil && (*pc < 0 || *pc > 100) {
				t.Fatalf("run %d: a percentage of %d in %+v", run, *pc, st)
			}
		}
	}
}

// nth picks what a sort would put at the index, for inputs with and without ties.
func TestNthIsWhatASortPicks(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	for run := range 2000 {
		xs := make([]int64, 1+rnd.IntN(60))
		spread := []int64{1, 3, 1000}[run%3] // all equal, many ties, few
		for i := range xs {
			xs[i] = rnd.Int64N(spread)
		}
		sorted := slices.Clone(xs)
		slices.Sort(sorted)
		n := rnd.IntN(len(xs))
		if got := nth(slices.Clone(xs), n, cmp.Compare[int64]); got != sorted[n] {
			t.Fatalf("nth(%v, %d) = %d, want %d", xs, n, got, sorted[n])
		}
	}
}

func TestStatusTraffic(t *testing.T) {
	for _, tc := range []struct {
		name               string
		sums               fleetTraffic
		retry, throttledPc *int32
	}{
		{"ratios", fleetTraffic{pods: 3, requests: 300, accepts: 150, retries: 30, throttled: 50}, ptr.To[int32](11), ptr.To[int32](17)},
		{"no traffic", fleetTraffic{pods: 2}, nil, nil},
		{"retries only", fleetTraffic{pods: 1, requests: 4, retries: 4}, nil, ptr.To[int32](0)},
		{"floor beyond first attempts shows 100", fleetTraffic{pods: 1, requests: 30, retries: 20}, ptr.To[int32](100), ptr.To[int32](0)},
		{"issue 29: requests and retries near 10^12", fleetTraffic{pods: 1, requests: breakerconfig.MaxTrafficCount, retries: breakerconfig.MaxTrafficCount - 1}, ptr.To[int32](100), ptr.To[int32](0)},
		{"all throttled", fleetTraffic{pods: 1, requests: 10, throttled: 10}, ptr.To[int32](0), ptr.To[int32](100)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := statusTraffic(tc.sums)
			if got.Pods != int32(tc.sums.pods) || got.Requests != tc.sums.requests || got.Throttled != tc.sums.throttled {
				t.Errorf("counts %+v from %+v", got, tc.sums)
			}
			if !ptrEqual(got.RetryPercent, tc.retry) || !ptrEqual(got.ThrottledPercent, tc.throttledPc) {
				t.Errorf("retryPercent %v throttledPercent %v, want %v %v", deref(got.RetryPercent), deref(got.ThrottledPercent), deref(tc.retry), deref(tc.throttledPc))
			}
		})
	}
}

func ptrEqual(a, b *int32) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

func deref(p *int32) any {
	if p == nil {
		return "unset"
	}
	return *p
}

// Only a change of the counts alone may wait for minFleetInterval: any other change of the
// document, or a first fleet, goes at the usual pace.
func TestFleetOnly(t *testing.T) {
	cb := &resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "x", Generation: 1},
		Spec: resiliencev1alpha1.CircuitBreakerSpec{Throttle: &resiliencev1alpha1.Throttle{K: ptr.To(2.0)}}}
	doc := func(cb *resiliencev1alpha1.CircuitBreaker, s fleetTraffic) (string, breakerconfig.Config) {
		c, err := render(cb, nil, s)
		if err != nil {
			t.Fatal(err)
		}
		b, err := breakerconfig.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		return string(b), c
	}
	old, _ := doc(cb, fleetTraffic{pods: 2, median: window{requests: 10, accepts: 10}})
	if _, c := doc(cb, fleetTraffic{pods: 3, median: window{requests: 12, accepts: 9}}); !fleetOnly(old, c) {
		t.Error("a change of the counts alone is not fleet-only")
	}
	next := cb.DeepCopy()
	next.Generation, next.Spec.Window = 2, &metav1.Duration{Duration: time.Minute}
	if _, c := doc(next, fleetTraffic{pods: 3}); fleetOnly(old, c) {
		t.Error("a new generation is fleet-only")
	}
	plain, _ := doc(&resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "x", Generation: 1}}, fleetTraffic{})
	if _, c := doc(cb, fleetTraffic{pods: 3}); fleetOnly(plain, c) {
		t.Error("a first fleet is fleet-only")
	}
}
