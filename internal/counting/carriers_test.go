package counting

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// Node entries and pods' own reports together: the operator counts pods, whatever
// carries them (docs/design.md §9, §5.17).

// nodeOf is node's entry for the pods of lines, as the operator reads it when its cache
// has every one of them bound there. It does not run the CRD's rules on the entry, which
// cost these property tests most of their time: TestNodeEntriesAreAdmitted holds Node to
// them for lines of every kind.
func nodeOf(t *testing.T, node string, lines []PodLine) Entry {
	t.Helper()
	entries := Node(lines)
	if len(entries) != 1 {
		t.Fatalf("%s: %d entries, want 1: %+v", node, len(entries), entries)
	}
	e := entries[0]
	got, capped := FromNode(node, &e, Seen{}, int64(e.Pods), anyPod)
	if capped {
		t.Fatalf("%s capped", node)
	}
	return got
}

// earnedOpens is a node's claim of pods of which opens earned an Open, the earliest at
// t0+since, the others closed.
func earnedOpens(pods, opens int32, since time.Duration) resiliencev1alpha1.NodeBreakerEntry {
	return resiliencev1alpha1.NodeBreakerEntry{Name: "b", Pods: pods, Open: opens, EarnedOpen: opens, Closed: pods - opens,
		OpenSince: &metav1.MicroTime{Time: t0.Add(since)}, ConfigGeneration: 1, OnLatestConfig: pods}
}

func fromNode(node string, e resiliencev1alpha1.NodeBreakerEntry, running int64) Entry {
	got, _ := FromNode(node, &e, Seen{}, running, anyPod)
	return got
}

// The quorum counts pods, each once: a node's 60 earned Opens over 100 pods are 60 of
// the fleet's pods, no more and no fewer.
func TestTheQuorumCountsPodsWhateverCarriesThem(t *testing.T) {
	s := time.Second
	tripping := func(n int, from time.Duration) []member {
		var out []member
		for i := range n {
			out = append(out, at(fmt.Sprintf("solo-%d", i), open, tripped, from+time.Duration(i)*s))
		}
		return out
	}
	for _, tc := range []struct {
		name       string
		entries    []Entry
		wantOpen   bool
		wantEarned int64
		wantNeed   int64
		wantSince  time.Duration
	}{
		{"60 of a node's 100 pods meet 50% of 110", append(entriesOf(closedPods("p", 10)...), fromNode("node-a", earnedOpens(100, 60, 5*s), 100)),
			true, 60, 55, 5 * s},
		{"50 of them do not", append(entriesOf(closedPods("p", 10)...), fromNode("node-a", earnedOpens(100, 50, 5*s), 100)),
			false, 50, 55, 0},
		{"five pods of their own complete the quorum; the node's Open dates it, the fifth most recent of them",
			append(entriesOf(append(closedPods("p", 5), tripping(5, 6*s)...)...), fromNode("node-a", earnedOpens(100, 50, 5*s), 100)),
			true, 55, 55, 5 * s},
		{"a node's Opens after theirs: the quorum was complete at the fifth of them",
			append(entriesOf(append(closedPods("p", 5), tripping(5, s)...)...), fromNode("node-a", earnedOpens(100, 50, 30*s), 100)),
			true, 55, 55, s},
		{"two nodes: complete at the second most recent",
			[]Entry{fromNode("node-a", earnedOpens(50, 30, 5*s), 50), fromNode("node-b", earnedOpens(50, 30, 3*s), 50)},
			true, 60, 50, 3 * s},
		{"a node claiming 1,024 earned Opens speaks for the 3 pods it runs",
			append(entriesOf(closedPods("p", 7)...), fromNode("node-a", earnedOpens(resiliencev1alpha1.MaxNodePods, resiliencev1alpha1.MaxNodePods, 5*s), 3)),
			false, 3, 5, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cb := fleetBreaker(50)
			d := DecideFleet(cb, tc.entries)
			if d.Open != tc.wantOpen || d.Earned != tc.wantEarned || d.Need != tc.wantNeed {
				t.Errorf("open %v earned %d need %d, want %v %d %d", d.Open, d.Earned, d.Need, tc.wantOpen, tc.wantEarned, tc.wantNeed)
			}
			if tc.wantOpen && (d.Verdict == nil || !d.Verdict.Since.Equal(t0.Add(tc.wantSince))) {
				t.Errorf("verdict %+v, want Open since t0+%s", d.Verdict, tc.wantSince)
			}
			v := Aggregate(cb, tc.entries)
			var pods int64
			for _, e := range tc.entries {
				pods += e.Pods
			}
			if int64(v.Counts.Reporting) != pods || (v.State == open) != tc.wantOpen {
				t.Errorf("status: %d pods reporting, state %s", v.Counts.Reporting, v.State)
			}
			if !tc.wantOpen && tc.wantEarned > 0 {
				want := fmt.Sprintf("%d of %d pods open on their own evidence, quorum 50%% needs %d", tc.wantEarned, pods, tc.wantNeed)
				if got := v.HalfOpenedMessage(cb); got != want {
					t.Errorf("message %q\nwant    %q", got, want)
				}
			}
		})
	}
}

// The Open condition names the pods a node entry names, and counts the others by their
// node; status.members names each pod with its node.
func TestMessagesNameANodesPods(t *testing.T) {
	s := time.Second
	var lines []PodLine
	for i := range 7 {
		lines = append(lines, podLine(fmt.Sprintf("web-%02d", i), "r1", withWindow(wire(open, tripped, time.Duration(i+1)*s, 1), 40, 50, 0, 0, 0, 0)))
	}
	e := onlyEntry(t, lines)
	// Two of the five pods it names are no longer bound to it.
	gone := map[string]bool{"web-06": true, "web-04": true}
	node, capped := FromNode("node-a", &e, Seen{}, 7, func(name string, _ types.UID) bool { return !gone[name] })
	if !capped || len(node.Notable) != 3 {
		t.Fatalf("capped %v, notable %+v", capped, node.Notable)
	}
	entries := append(entriesOf(at("solo", open, tripped, 20*s)), node)
	cb := fleetBreaker(100)
	v := Aggregate(cb, entries)
	want := "The fleet is open since 2026-11-29T12:00:01Z: 8 of 8 pods opened on their own evidence (quorum 100%): solo; " +
		"web-05: 50% of 40 calls failed; web-03: 50% of 40 calls failed; web-02: 50% of 40 calls failed; 4 more pods of node node-a"
	if got := v.OpenedMessage(cb); got != want {
		t.Errorf("message %q\nwant    %q", got, want)
	}
	var listed []string
	for _, m := range v.Members {
		listed = append(listed, m.Node+"/"+m.Pod)
	}
	if want := []string{"/solo", "node-a/web-05", "node-a/web-03", "node-a/web-02"}; !slices.Equal(listed, want) {
		t.Errorf("members %v, want %v", listed, want)
	}
	// Scope Pod names the most recent Open any carrier names.
	if got := Aggregate(podBreaker(1), []Entry{node}).OpenedMessage(podBreaker(1)); got != "Pod web-05 opened the circuit at 2026-11-29T12:00:06Z (Tripped): 50% of 40 calls failed" {
		t.Errorf("Pod scope: %q", got)
	}
	// A node's refusal names the node, its count and its sample.
	refusing := wire(closed, started, 0, 1)
	refusing.ConfigError = "window: must be positive"
	n := nodeOf(t, "node-b", linesOf("p", refusing, refusing, wire(closed, started, 0, 1)))
	if v := Aggregate(podBreaker(1), []Entry{n}); !slices.Equal(v.Rejected, []string{"node node-b, 2 pods: window: must be positive"}) || v.Counts.OnLatestConfig != 1 {
		t.Errorf("rejected %q, onLatestConfig %d", v.Rejected, v.Counts.OnLatestConfig)
	}
}

// A node's traffic counts as its average pod's, once for each of its pods.
func TestTrafficOfNodesAndPods(t *testing.T) {
	n := ptr.To[int64]
	cb := throttled(2)
	var lines []PodLine
	for i := range 100 {
		lines = append(lines, podLine(fmt.Sprintf("web-%03d", i), "r1", withWindow(wire(closed, started, 0, 1), 0, 0, 1000, 500, 10, 0)))
	}
	node := nodeOf(t, "node-a", lines)
	var pods []member
	for i := range 10 {
		pods = append(pods, trafficMember(fmt.Sprintf("solo-%d", i), n(1000), n(900), n(0), n(0)))
	}
	got := TrafficOf(cb, append(entriesOf(pods...), node))
	// Every window's p is 0 at k = 2; ties go to the fewest accepts: the node's pods
	// first, and the lower middle of 110 pods is one of them.
	want := FleetTraffic{Pods: 110, Requests: 110_000, Accepts: 50_000 + 9000, Retries: 1000, Median: Window{Requests: 1000, Accepts: 500}}
	if got != want {
		t.Errorf("traffic %+v\nwant    %+v", got, want)
	}
	// A node of two pods claiming the schema's most counts as eight typical pods.
	liar := resiliencev1alpha1.NodeBreakerEntry{Name: "b", Pods: 2, Closed: 2, Requests: resiliencev1alpha1.MaxNodeTrafficSum, Accepts: resiliencev1alpha1.MaxNodeTrafficSum}
	got = TrafficOf(cb, append(entriesOf(pods...), fromNode("node-b", liar, 2)))
	if got.Pods != 12 || got.Requests != 10_000+2*4*1000 || got.Median != (Window{Requests: 1000, Accepts: 900}) {
		t.Errorf("a node claiming the most: %+v", got)
	}
}

// One node, one share of its pods (docs/design.md §5.17): a node that holds fewer than
// half of the pods, whatever it says of them within the schema, cannot take the window the
// operator publishes outside the range its honest pods' windows span, cannot count for
// more than four typical pods each in status.traffic, cannot open the fleet or the
// candidate on its own, and keeps every percentage within [0, 100].
func TestOneNodeOneShareOfItsPods(t *testing.T) {
	rnd := rand.New(rand.NewPCG(41, 17))
	for run := range 3000 {
		k := []float64{1, 1.5, 2, 10, 1 + 9*rnd.Float64()}[rnd.IntN(5)]
		cb := throttled(k)
		cb.Spec.Scope, cb.Spec.FleetQuorumPercent = resiliencev1alpha1.ScopeFleet, ptr.To(int32(50+rnd.IntN(51)))
		cb.Spec.Candidate = &resiliencev1alpha1.CandidatePolicy{FailureRatePercent: ptr.To[int32](10)}
		cb.CreationTimestamp = metav1.NewTime(t0.Add(-time.Hour))
		var entries []Entry
		lo, hi := 1.0, 0.0
		var honestPods, honestRequests, mostPerPod int64
		// Honest carriers: pods on their own, and nodes whose pods see the same window.
		for c := range 1 + rnd.IntN(8) {
			requests := []int64{rnd.Int64N(30), rnd.Int64N(2000), rnd.Int64N(1_000_000)}[rnd.IntN(3)]
			accepts := rnd.Int64N(requests + 1)
			p := Rejection(Window{Requests: requests, Accepts: accepts}, k)
			lo, hi = min(lo, p), max(hi, p)
			line := withWindow(wire(closed, started, 0, 1), requests, 0, requests, accepts, rnd.Int64N(requests+1), 0)
			line.Candidate = &breakerconfig.CandidateEntry{State: breakerconfig.StateClosed, Since: breakerconfig.NewTime(t0)}
			pods := int64(1)
			if rnd.IntN(2) == 0 {
				pods = 1 + rnd.Int64N(40)
				var lines []PodLine
				for i := range pods {
					lines = append(lines, podLine(fmt.Sprintf("web-%d-%d", c, i), "r1", line))
				}
				entries = append(entries, nodeOf(t, fmt.Sprintf("node-%d", c), lines))
			} else {
				m := trafficMember(fmt.Sprintf("solo-%d", c), ptr.To(requests), ptr.To(accepts), ptr.To[int64](0), ptr.To[int64](0))
				m.entry.ConfigGeneration, m.entry.Candidate = 1, &resiliencev1alpha1.CandidateReport{State: closed}
				entries = append(entries, entriesOf(m)...)
			}
			honestPods += pods
			honestRequests += pods * requests
			mostPerPod = max(mostPerPod, requests)
		}
		// The liar: fewer pods running than the honest ones, any claim within the schema.
		running := rnd.Int64N(honestPods)
		claim := int32(anyOf(rnd, resiliencev1alpha1.MaxNodePods))
		const most = resiliencev1alpha1.MaxNodeTrafficSum
		requests := anyOf(rnd, most)
		liar := resiliencev1alpha1.NodeBreakerEntry{Name: "b", Revision: "r1", Pods: claim, Open: claim, EarnedOpen: claim,
			OpenSince: &metav1.MicroTime{Time: t0}, ConfigGeneration: 1, OnLatestConfig: claim,
			Calls: anyOf(rnd, most), Requests: requests, Accepts: anyOf(rnd, requests), Retries: anyOf(rnd, requests), Throttled: anyOf(rnd, requests),
			Candidate: &resiliencev1alpha1.NodeCandidateSummary{Pods: claim, Open: claim, Opens: anyOf(rnd, most)}}
		liar.Failures = anyOf(rnd, liar.Calls)
		if rnd.IntN(4) == 0 {
			liar.Accepts = anyOf(rnd, most) // a report stored before accepts ≤ requests
		}
		lying, _ := FromNode("liar", &liar, Seen{OpenSince: t0}, running, anyPod)
		entries = slices.Insert(entries, rnd.IntN(len(entries)+1), lying)

		got := TrafficOf(cb, entries)
		if p := Rejection(got.Median, k); p < lo || p > hi {
			t.Fatalf("run %d, k %v: the published %+v refuses with p %v, outside the honest pods' [%v, %v]; the liar %+v runs %d pods",
				run, k, got.Median, p, lo, hi, liar, running)
		}
		bound := maxShareOfMedian * max(mostPerPod, resiliencev1alpha1.DefaultMinimumThroughput) * lying.Pods
		if got.Requests > honestRequests+bound || got.Pods != honestPods+lying.Pods {
			t.Fatalf("run %d: %+v from honest requests %d over %d pods; the liar's %d pods count for more than %d", run, got, honestRequests, honestPods, lying.Pods, bound)
		}
		v := Aggregate(cb, entries)
		if v.Fleet == nil || v.Fleet.Open || v.State == open {
			t.Fatalf("run %d: %d lying pods of %d opened the fleet: %+v", run, lying.Pods, honestPods+lying.Pods, v.Fleet)
		}
		if v.Candidate == nil || v.Candidate.State == open {
			t.Fatalf("run %d: %d lying pods of %d opened the candidate: %+v", run, lying.Pods, honestPods+lying.Pods, v.Candidate)
		}
		for _, pc := range percentages(v) {
			if *pc < 0 || *pc > 100 {
				t.Fatalf("run %d: a percentage of %d in %+v", run, *pc, v)
			}
		}
	}
}

// percentages are the percentages of a status.
func percentages(v View) []*int32 {
	var out []*int32
	if st := v.Traffic; st != nil {
		out = append(out, st.RetryPercent, st.ThrottledPercent)
	}
	for _, r := range v.Revisions {
		out = append(out, r.FailureRatePercent)
	}
	for _, m := range v.Members {
		out = append(out, m.FailureRatePercent, m.SlowCallRatePercent)
	}
	return slices.DeleteFunc(out, func(p *int32) bool { return p == nil })
}
