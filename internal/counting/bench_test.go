package counting

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// The breakers the benchmarks count: a throttled one whose pods report their traffic, a
// breaker Group whose pods each name their worst keys, and a Fleet breaker in an incident
// (half of its pods open on their own evidence).
func benchBreakers() (traffic, group, incident *resiliencev1alpha1.CircuitBreaker) {
	k := 2.0
	traffic = &resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "b", Generation: 1},
		Spec: resiliencev1alpha1.CircuitBreakerSpec{Throttle: &resiliencev1alpha1.Throttle{K: &k}}}
	group = &resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "b", Generation: 1}}
	incident = &resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "b", Generation: 1},
		Spec: resiliencev1alpha1.CircuitBreakerSpec{Scope: resiliencev1alpha1.ScopeFleet}}
	return traffic, group, incident
}

// benchLine is pod i's entry of breaker "b" in each shape, as its agent receives it.
func benchLine(shape string, i int, since time.Time) breakerconfig.ReportEntry {
	e := breakerconfig.ReportEntry{Name: "b", State: breakerconfig.StateClosed, Since: breakerconfig.NewTime(since), Reason: breakerconfig.ReasonStarted, ConfigGeneration: 1}
	switch shape {
	case "traffic":
		requests, accepts, retries, none := int64(900+i%200), int64(400+i%300), int64(i%50), int64(0)
		e.Requests, e.Accepts, e.Retries, e.Throttled = &requests, &accepts, &retries, &none
	case "group":
		e.Keys = &breakerconfig.KeySummary{Keys: int32(200 + i%100), Open: int32(i % 3),
			Worst: []string{fmt.Sprintf("host-%d.example", i%7), fmt.Sprintf("host-%d.example", i%11)}}
	case "incident":
		if i%2 == 0 {
			calls, rate := int64(40), int32(60)
			e.State, e.Reason, e.Calls, e.FailureRatePercent = breakerconfig.StateOpen, breakerconfig.ReasonTripped, &calls, &rate
			e.Since = breakerconfig.NewTime(since.Add(time.Duration(i) * time.Millisecond))
		}
	}
	return e
}

// asReportEntry is a wire entry as a pod's own BreakerReport holds it.
func asReportEntry(e breakerconfig.ReportEntry) resiliencev1alpha1.BreakerReportEntry {
	out := resiliencev1alpha1.BreakerReportEntry{Name: e.Name, PodCircuit: PodCircuit(&e), Reason: e.Reason,
		Requests: e.Requests, Accepts: e.Accepts, Retries: e.Retries, Throttled: e.Throttled}
	if k := e.Keys; k != nil {
		out.Keys = &resiliencev1alpha1.KeySummary{Keys: k.Keys, Open: k.Open, HalfOpen: k.HalfOpen, Worst: k.Worst}
	}
	return out
}

// BenchmarkAggregate is one status computation (Aggregate) of a breaker, as the status
// controller makes it on every reconcile of its namespace: over 5,000 pods that report on
// their own (an entry of one pod each, as before node agents), and over 1,000 nodes of
// 100 pods each, the 100,000-pod fleet, whose agents report their sums. The entries are
// read (FromPod, FromNode) before the clock starts.
//
//	go test -run '^$' -bench BenchmarkAggregate -benchmem ./internal/counting
func BenchmarkAggregate(b *testing.B) {
	since := time.Unix(1_800_000_000, 0)
	traffic, group, incident := benchBreakers()
	for _, tc := range []struct {
		shape string
		cb    *resiliencev1alpha1.CircuitBreaker
	}{{"traffic", traffic}, {"group", group}, {"incident", incident}} {
		const pods = 5000
		b.Run(fmt.Sprintf("%s/pods=%d", tc.shape, pods), func(b *testing.B) {
			entries := make([]Entry, pods)
			for i := range entries {
				e := asReportEntry(benchLine(tc.shape, i, since))
				entries[i] = FromPod(fmt.Sprintf("app-%04d", i), &e, e.Since.Time, "r1")
			}
			b.ReportAllocs()
			for b.Loop() {
				_ = Aggregate(tc.cb, entries)
			}
		})
	}
	for _, tc := range []struct {
		shape string
		cb    *resiliencev1alpha1.CircuitBreaker
	}{{"traffic", traffic}, {"group", group}, {"incident", incident}} {
		const nodes, perNode = 1000, 100
		b.Run(fmt.Sprintf("%s/nodes=%dx%d", tc.shape, nodes, perNode), func(b *testing.B) {
			entries := make([]Entry, nodes)
			for n := range entries {
				lines := make([]PodLine, perNode)
				for p := range lines {
					i := n*perNode + p
					name := fmt.Sprintf("app-%06d", i)
					lines[p] = PodLine{Name: name, UID: types.UID(name), Revision: "r1", Entries: []breakerconfig.ReportEntry{benchLine(tc.shape, i, since)}}
				}
				e := Node(lines)[0]
				entries[n], _ = FromNode(fmt.Sprintf("node-%04d", n), &e, Seen{}, perNode, func(string, types.UID) bool { return true })
			}
			b.ReportAllocs()
			for b.Loop() {
				_ = Aggregate(tc.cb, entries)
			}
		})
	}
}

// BenchmarkNode is what a node agent spends adding up its pods' lines into its entries
// (Node) for one write: 100 pods, and 256, the most one NodeBreakerReport holds.
//
//	go test -run '^$' -bench BenchmarkNode -benchmem ./internal/counting
func BenchmarkNode(b *testing.B) {
	since := time.Unix(1_800_000_000, 0)
	for _, shape := range []string{"traffic", "group", "incident"} {
		for _, pods := range []int{100, 256} {
			lines := make([]PodLine, pods)
			for i := range lines {
				name := fmt.Sprintf("app-%03d", i)
				lines[i] = PodLine{Name: name, UID: types.UID(name), Revision: "r1", Entries: []breakerconfig.ReportEntry{benchLine(shape, i, since)}}
			}
			b.Run(fmt.Sprintf("%s/pods=%d", shape, pods), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					_ = Node(lines)
				}
			})
		}
	}
}
