package controller

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// What a status reconcile costs in the operator's own code when one pod of a fleet, half
// of it open, changes its entry: the index's (apply the pod's derivation, read the breaker's members,
// aggregate them once), against building every member again from every report and
// aggregating them, as each reconcile did before the index (its list of the cache, the
// larger part of its cost, not included).
//
//	go test -run '^$' -bench BenchmarkOnePodChanges -benchmem ./internal/controller/
func BenchmarkOnePodChanges(b *testing.B) {
	cb := &resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b", UID: "cb", Generation: 1}}
	cb.Spec.Scope = resiliencev1alpha1.ScopeFleet
	entryAt := func(i int, state resiliencev1alpha1.State) resiliencev1alpha1.BreakerReportEntry {
		reason := started
		if state == resiliencev1alpha1.StateOpen {
			reason = tripped
		}
		return resiliencev1alpha1.BreakerReportEntry{Name: "b", State: state, Reason: reason, ConfigGeneration: 1,
			Since: metav1.NewTime(t0.Add(time.Duration(i) * time.Millisecond))}
	}
	// The i-th change: a pod's entry goes the other way (open ones close, closed ones
	// open), at a time no entry had before.
	flipped := func(pods, i int) resiliencev1alpha1.BreakerReportEntry {
		e := entryAt(pods+i, []resiliencev1alpha1.State{closed, open}[i%pods%2])
		return e
	}
	for _, pods := range []int{500, 2000, 5000} {
		reports := make([]resiliencev1alpha1.BreakerReport, pods)
		for i := range reports {
			reports[i] = resiliencev1alpha1.BreakerReport{
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("pod-%05d", i), UID: types.UID(fmt.Sprint(i))},
				// Half the fleet open on its own evidence, as in an incident.
				Breakers: []resiliencev1alpha1.BreakerReportEntry{entryAt(i, []resiliencev1alpha1.State{open, closed}[i%2])},
			}
		}
		b.Run(fmt.Sprintf("index/pods=%d", pods), func(b *testing.B) {
			var idx memberIndex
			ns := idx.namespaceFor("ns")
			all := make(map[string]derived, pods)
			for i := range reports {
				all[reports[i].Name] = derived{state: &podState{members: membersOf(&reports[i], []time.Time{t0})}}
			}
			idx.apply(ns, all)
			b.ResetTimer()
			for i := range b.N {
				rep := &reports[i%pods]
				changed := *rep
				changed.Breakers = []resiliencev1alpha1.BreakerReportEntry{flipped(pods, i)}
				idx.apply(ns, map[string]derived{rep.Name: {state: &podState{members: membersOf(&changed, []time.Time{t0})}}})
				out, _ := idx.read(ns, []string{"b"})
				_ = out.view(cb)
			}
		})
		b.Run(fmt.Sprintf("rebuild/pods=%d", pods), func(b *testing.B) {
			for i := range b.N {
				rep := &reports[i%pods]
				saved := rep.Breakers
				rep.Breakers = []resiliencev1alpha1.BreakerReportEntry{flipped(pods, i)}
				byBreaker := map[string][]member{}
				for k := range reports {
					for _, m := range membersOf(&reports[k], []time.Time{t0}) {
						byBreaker[m.entry.Name] = append(byBreaker[m.entry.Name], m)
					}
				}
				kept, _ := oddShapes(byBreaker["b"])
				_ = aggregate(cb, kept)
				rep.Breakers = saved
			}
		})
	}
}
