package controller

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/counting"
)

// What a status reconcile costs in the operator's own code when one carrier of a fleet,
// half of it open, changes what it says: the index's work (apply the carrier's derivation,
// read the breaker's entries, aggregate them once). Carriers are pods that report on their
// own (500 to 5,000), or node reports of 100 pods each (up to 1,000 nodes: 100,000 pods).
//
//	go test -run '^$' -bench BenchmarkOneCarrierChanges -benchmem ./internal/controller/
func BenchmarkOneCarrierChanges(b *testing.B) {
	cb := &resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b", UID: "cb", Generation: 1}}
	cb.Spec.Scope = resiliencev1alpha1.ScopeFleet
	pod := func(i int, state resiliencev1alpha1.State) counting.Entry {
		reason := started
		if state == resiliencev1alpha1.StateOpen {
			reason = tripped
		}
		since := t0.Add(time.Duration(i) * time.Millisecond)
		e := resiliencev1alpha1.BreakerReportEntry{Name: "b", PodCircuit: resiliencev1alpha1.PodCircuit{State: state, ConfigGeneration: 1,
			Since: metav1.NewTime(since)}, Reason: reason}
		return counting.FromPod(fmt.Sprintf("pod-%05d", i), &e, since, "")
	}
	node := func(i int, open int64) counting.Entry {
		return counting.Entry{Breaker: "b", Node: fmt.Sprintf("node-%04d", i), Pods: 100, Open: open, EarnedOpen: open, Closed: 100 - open,
			OpenSince: t0.Add(time.Duration(i) * time.Millisecond), ConfigGeneration: 1, OnLatestConfig: 100}
	}
	run := func(name string, carriers int, carrierOf func(int) carrier, entryOf func(i, change int) counting.Entry) {
		b.Run(name, func(b *testing.B) {
			var idx entryIndex
			ns := idx.namespaceFor("ns")
			all := make(map[carrier]derived, carriers)
			for i := range carriers {
				all[carrierOf(i)] = derived{exists: true, entries: []counting.Entry{entryOf(i, 0)}}
			}
			idx.apply(ns, all)
			b.ResetTimer()
			for i := range b.N {
				k := i % carriers
				idx.apply(ns, map[carrier]derived{carrierOf(k): {exists: true, entries: []counting.Entry{entryOf(k, i+1)}}})
				out, _ := idx.read(ns, []string{"b"})
				_ = out.view(cb)
			}
		})
	}
	for _, pods := range []int{500, 5000} {
		run(fmt.Sprintf("pods=%d", pods), pods, func(i int) carrier { return carrier{pod: fmt.Sprintf("pod-%05d", i)} },
			func(i, change int) counting.Entry {
				// Half the fleet open on its own evidence, as in an incident; a change flips one.
				return pod(i, []resiliencev1alpha1.State{open, closed}[(i+change)%2])
			})
	}
	for _, nodes := range []int{50, 200, 1000} {
		run(fmt.Sprintf("nodes=%d×100", nodes), nodes, func(i int) carrier { return carrier{node: fmt.Sprintf("node-%04d", i)} },
			// A carrier says something new at each visit: its visits are `nodes` changes
			// apart, and no node count here is a multiple of 7.
			func(i, change int) counting.Entry { return node(i, int64(50+change%7)) })
	}
}
