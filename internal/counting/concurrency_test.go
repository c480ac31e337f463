package counting

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// One bulkhead for the fleet (docs/design.md §12): the share, status.concurrency and the
// fleet's baseline over pods that report on their own and over nodes.

// limited is a breaker whose whole fleet may have maxInFlight calls in flight.
func limited(maxInFlight int32) *resiliencev1alpha1.CircuitBreaker {
	cb := fleetBreaker(0)
	cb.Spec.Scope = resiliencev1alpha1.ScopePod
	cb.Spec.Concurrency = &resiliencev1alpha1.Concurrency{MaxInFlight: maxInFlight}
	return cb
}

// inFlightMember is a closed pod reporting its concurrency figures (nil: left out).
func inFlightMember(pod string, peak, refused *int64, baseline time.Duration) member {
	m := at(pod, closed, started, 0)
	m.entry.InFlightPeak, m.entry.Limited = peak, refused
	if baseline != 0 {
		m.entry.Baseline = &metav1.Duration{Duration: baseline}
	}
	return m
}

// The pods' side spells the rule of a pod not yet counted again (breakerconfig, which
// cannot import this package); the two must agree wherever a document can take them.
func TestShareBeforeToldIsThePodsRule(t *testing.T) {
	check := func(share, pods int64) {
		if got, want := int64(breakerconfig.ShareBeforeTold(int(share), int(pods))), ShareBeforeTold(share, pods); got != want {
			t.Errorf("ShareBeforeTold(%d, %d): the pods' %d, the operator's %d", share, pods, got, want)
		}
	}
	for _, c := range [][2]int64{{0, 0}, {0, 5}, {1, 0}, {1, 1}, {1, 1_000_000}, {25, 4}, {3, 2}, {1_000_000, 1}, {1_000_000, 999_999}} {
		check(c[0], c[1])
	}
	r := rand.New(rand.NewPCG(44, 44))
	for range 10_000 {
		pods := r.Int64N(1_000_001)
		check(Share(1+r.Int64N(resiliencev1alpha1.MaxInFlight), pods), pods)
	}
}

func TestShare(t *testing.T) {
	for _, tc := range []struct{ max, pods, share, untold int64 }{
		{100, 0, 100, 100}, // the first pod of a fleet is the fleet
		{100, 4, 25, 20},   // a fifth pod takes 25 × 4 / 5 until it is counted
		{100, 3, 33, 24},
		{10, 25, 1, 1}, // more pods than the limit: each still makes a call
		{resiliencev1alpha1.MaxInFlight, 1, resiliencev1alpha1.MaxInFlight, resiliencev1alpha1.MaxInFlight / 2},
	} {
		share := Share(tc.max, tc.pods)
		if share != tc.share || ShareBeforeTold(share, tc.pods) != tc.untold {
			t.Errorf("%d over %d pods: share %d, before told %d; want %d, %d", tc.max, tc.pods, share, ShareBeforeTold(share, tc.pods), tc.share, tc.untold)
		}
		if tc.pods > 0 && share*tc.pods > tc.max && share != 1 {
			t.Errorf("%d over %d pods: the shares add up to %d", tc.max, tc.pods, share*tc.pods)
		}
	}
}

// Every running pod counts; the share divides the limit among them; inFlight adds the
// peaks, each pod's at most its share; limited adds the refusals, bounded as traffic is;
// the baseline is the upper median pod's among those that report one. A breaker without
// spec.concurrency has none.
func TestConcurrencyOf(t *testing.T) {
	n := ptr.To[int64]
	ms := time.Millisecond
	cb := limited(100)
	got := ConcurrencyOf(cb, entriesOf(
		inFlightMember("a", n(20), n(3), 10*ms),
		inFlightMember("b", n(25), n(0), 12*ms),
		inFlightMember("c", n(90), n(5), 0), // past its share of 25: counts 25
		inFlightMember("d", nil, nil, 11*ms),
	))
	want := FleetConcurrency{MaxInFlight: 100, Pods: 4, Share: 25, InFlight: 20 + 25 + 25, Limited: 8, Baseline: 11 * ms}
	if got != want {
		t.Errorf("concurrency %+v, want %+v", got, want)
	}
	if st := StatusConcurrency(got); *st != (resiliencev1alpha1.FleetConcurrency{MaxInFlight: 100, Pods: 4, Share: 25, InFlight: 70, Limited: 8}) {
		t.Errorf("status %+v", st)
	}
	if got := ConcurrencyOf(cb, nil); got != (FleetConcurrency{MaxInFlight: 100, Share: 100}) {
		t.Errorf("no pods yet: %+v", got)
	}
	if got := ConcurrencyOf(fleetBreaker(0), entriesOf(inFlightMember("a", n(20), n(3), ms))); got != (FleetConcurrency{}) {
		t.Errorf("no spec.concurrency: %+v", got)
	}
	// Aggregate writes it into the view, with no pods too.
	if v := Aggregate(cb, nil); v.Concurrency == nil || v.Concurrency.Share != 100 {
		t.Errorf("view with no pods: %+v", v.Concurrency)
	}
	if v := Aggregate(fleetBreaker(0), entriesOf(inFlightMember("a", n(20), n(3), ms))); v.Concurrency != nil {
		t.Errorf("view without spec.concurrency: %+v", v.Concurrency)
	}
}

// What a pod writes past the schema (a report stored before it) counts within it, and
// 5,000 pods at the bounds neither overflow nor pass the limit.
func TestConcurrencyOfBoundsWhatAPodSays(t *testing.T) {
	n := ptr.To[int64]
	over, under := inFlightMember("a", n(math.MaxInt64), n(-1), 0), inFlightMember("a", n(-5), n(math.MaxInt64), 1000*time.Hour)
	e := FromPod("a", &over.entry, t0, "")
	if e.InFlight != (InFlight{Peak: breakerconfig.MaxInFlight}) {
		t.Errorf("past the bounds: %+v", e.InFlight)
	}
	e = FromPod("a", &under.entry, t0, "")
	if e.InFlight != (InFlight{Limited: breakerconfig.MaxTrafficCount, Baseline: breakerconfig.MaxBaseline}) {
		t.Errorf("past the bounds: %+v", e.InFlight)
	}
	many := make([]member, 5000)
	for i := range many {
		many[i] = inFlightMember("p", n(breakerconfig.MaxInFlight), n(breakerconfig.MaxTrafficCount), breakerconfig.MaxBaseline)
	}
	got := ConcurrencyOf(limited(resiliencev1alpha1.MaxInFlight), entriesOf(many...))
	if got.InFlight != resiliencev1alpha1.MaxInFlight || got.Limited != 5000*breakerconfig.MaxTrafficCount || got.Limited > maxFleetCount || got.Share != 200 {
		t.Errorf("5,000 pods at the bounds: %+v", got)
	}
}

// One pod, one share (§5.17): a minority of the pods, whatever they report within the
// schema, cannot take the fleet's baseline outside the range the others' own baselines
// span, nor make one pod's refusals count for more than four typical pods', nor its peak
// for more than its share; a node's entry weighs as many pods as it counts.
func TestWhatAMinorityCannotDoToTheConcurrency(t *testing.T) {
	n := ptr.To[int64]
	ms := time.Millisecond
	cb := limited(1000)
	honest := func(i int) member {
		return inFlightMember("h", n(10), n(4), time.Duration(10+i)*ms) // 10ms ... 10+k ms
	}
	for _, lie := range []time.Duration{1, time.Nanosecond, breakerconfig.MaxBaseline} {
		for honestPods := 1; honestPods <= 6; honestPods++ {
			var pods []member
			for i := range honestPods {
				pods = append(pods, honest(i))
			}
			for range (honestPods - 1) / 2 { // strictly fewer than half of all the pods
				pods = append(pods, inFlightMember("liar", n(breakerconfig.MaxInFlight), n(breakerconfig.MaxTrafficCount), lie))
			}
			got := ConcurrencyOf(cb, entriesOf(pods...))
			if got.Baseline < 10*ms || got.Baseline > time.Duration(10+honestPods-1)*ms {
				t.Errorf("%d honest pods, %d lying %s: baseline %s, outside the honest range", honestPods, len(pods)-honestPods, lie, got.Baseline)
			}
			if got.InFlight > got.Share*got.Pods {
				t.Errorf("%d honest pods: inFlight %d past the shares %d × %d", honestPods, got.InFlight, got.Share, got.Pods)
			}
			if liars := int64(len(pods) - honestPods); got.Limited > int64(honestPods)*4+liars*4*20 {
				t.Errorf("%d honest pods: limited %d, a liar counts for more than 4 × minimumThroughput", honestPods, got.Limited)
			}
		}
	}
	// A node of 3 pods at 50ms weighs three pods against two pods at 10ms on their own.
	node := nodeOf(t, "node-a", linesOf("n",
		withInFlight(wire(closed, started, 0, 1), 5, 0, 50*ms), withInFlight(wire(closed, started, 0, 1), 5, 0, 50*ms),
		withInFlight(wire(closed, started, 0, 1), 5, 0, 50*ms)))
	entries := append(entriesOf(honest(0), honest(0)), node)
	if got := ConcurrencyOf(cb, entries); got.Baseline != 50*ms || got.Pods != 5 {
		t.Errorf("a node of three pods and two pods: %+v", got)
	}
	// A node that claims 1,024 pods but runs 1 counts as one.
	claim := onlyEntry(t, linesOf("n", withInFlight(wire(closed, started, 0, 1), 5, 0, 50*ms)))
	claim.Pods, claim.Closed, claim.OnLatestConfig, claim.InFlightPeak = 1024, 1024, 1024, 1024*5
	capped, _ := FromNode("node-b", &claim, Seen{}, 1, anyPod)
	entries = append(entriesOf(honest(0), honest(1)), capped)
	if got := ConcurrencyOf(cb, entries); got.Baseline != 11*ms || got.Pods != 3 || got.InFlight != 10+10+5 {
		t.Errorf("a node that claims more pods than it runs: %+v", got)
	}
}

// withInFlight is e with its concurrency figures.
func withInFlight(e breakerconfig.ReportEntry, peak, refused int64, baseline time.Duration) breakerconfig.ReportEntry {
	e.InFlightPeak, e.Limited = ptr.To(peak), ptr.To(refused)
	if baseline != 0 {
		e.Baseline = ptr.To(breakerconfig.Duration(baseline))
	}
	return e
}

// A node adds up its pods' peaks and refusals, each pod's at most four typical pods' (or 4
// × 20), and names its upper median pod's baseline among those that report one.
func TestNodeSumsConcurrency(t *testing.T) {
	ms := time.Millisecond
	pod := func(peak, refused int64, baseline time.Duration) breakerconfig.ReportEntry {
		return withInFlight(wire(closed, started, 0, 1), peak, refused, baseline)
	}
	e := onlyEntry(t, linesOf("p", pod(10, 2, 8*ms), pod(12, 0, 9*ms), pod(11, 1, 0), pod(1_000_000, 1_000_000, breakerconfig.MaxBaseline), wire(closed, started, 0, 1)))
	if e.InFlightPeak != 10+12+11+80 || e.Limited != 2+0+1+80 {
		t.Errorf("peaks %d, limited %d, want each pod bounded to 4 × 20", e.InFlightPeak, e.Limited)
	}
	if e.Baseline == nil || e.Baseline.Duration != 9*ms {
		t.Errorf("baseline %v, want the upper median of 8ms, 9ms and an hour", e.Baseline)
	}
	got, _ := FromNode("node-a", &e, Seen{}, int64(e.Pods), anyPod)
	if got.InFlight != (InFlight{Peak: e.InFlightPeak, Limited: e.Limited, Baseline: 9 * ms}) {
		t.Errorf("read back %+v", got.InFlight)
	}
	// Scaled down with the pods a node speaks for beyond its own; its baseline is a pod's.
	half, _ := FromNode("node-a", &e, Seen{}, int64(e.Pods)/2, anyPod)
	if half.InFlight.Peak != e.InFlightPeak*2/5 || half.InFlight.Baseline != 9*ms {
		t.Errorf("speaking for 2 of 5 pods: %+v", half.InFlight)
	}
	if plain := onlyEntry(t, linesOf("p", wire(closed, started, 0, 1))); plain.InFlightPeak != 0 || plain.Limited != 0 || plain.Baseline != nil {
		t.Errorf("pods without a limit: %+v", plain)
	}
	// Past the schema (an entry stored before it): within the bounds.
	e.InFlightPeak, e.Limited, e.Baseline = math.MaxInt64, -3, &metav1.Duration{Duration: -time.Second}
	got, _ = FromNode("node-a", &e, Seen{}, int64(e.Pods), anyPod)
	if got.InFlight != (InFlight{Peak: resiliencev1alpha1.MaxNodeInFlight}) {
		t.Errorf("past the bounds: %+v", got.InFlight)
	}
}
