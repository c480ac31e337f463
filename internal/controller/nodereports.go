package controller

import (
	"context"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// misboundEventInterval is how far apart the PodNotOnNode Events of one node report are:
// the report is its node's agent's to write, as often as every 250 ms, and a node that
// claims other nodes' pods (compromised, or confused) must not turn each write into an
// Event. A change of the pods it claims is told at most once an interval, the latest
// set; the same set is told once.
const misboundEventInterval = time.Minute

// misboundRecord is the last PodNotOnNode Event of one node report.
type misboundRecord struct {
	at   time.Time
	pods string // the pods it named, joined
}

// recordMisbound records, on each node report of the namespace that claims pods not bound
// to its node, a Warning Event naming the node and those pods, coalesced per report
// (misboundEventInterval). It returns when to come back for an Event put off (zero: none).
func (r *CircuitBreakerReconciler) recordMisbound(ctx context.Context, namespace string, misbound map[string][]string) time.Duration {
	now := time.Now()
	var wait time.Duration
	var due []client.ObjectKey
	r.mu.Lock()
	for key, rec := range r.misbound {
		if key.Namespace == namespace && len(misbound[key.Name]) == 0 && now.Sub(rec.at) >= misboundEventInterval {
			delete(r.misbound, key)
		}
	}
	for node, pods := range misbound {
		key := client.ObjectKey{Namespace: namespace, Name: node}
		joined := strings.Join(pods, ",")
		rec := r.misbound[key]
		if rec != nil && rec.pods == joined {
			continue
		}
		if rec != nil {
			if w := misboundEventInterval - now.Sub(rec.at); w > 0 {
				wait = earliest(wait, w)
				continue
			}
		}
		if r.misbound == nil {
			r.misbound = map[client.ObjectKey]*misboundRecord{}
		}
		r.misbound[key] = &misboundRecord{at: now, pods: joined}
		due = append(due, key)
	}
	r.mu.Unlock()
	slices.SortFunc(due, func(a, b client.ObjectKey) int { return strings.Compare(a.Name, b.Name) })
	for _, key := range due {
		var rep resiliencev1alpha1.NodeBreakerReport
		if err := r.Get(ctx, key, &rep); err != nil {
			// Deleted meanwhile: its lines went with it.
			logf.FromContext(ctx).V(1).Info("Node report gone before its Event", "nodeBreakerReport", key.Name, "error", err.Error())
			continue
		}
		pods := misbound[key.Name]
		r.Recorder.Eventf(&rep, nil, corev1.EventTypeWarning, resiliencev1alpha1.EventPodNotOnNode, "Count",
			"%d pods this report claims are not bound to node %s, so their lines count for nothing: %s", len(pods), key.Name, joinLimited(pods))
	}
	return wait
}
