package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/counting"
)

// cappedEventInterval is how far apart the PodNotOnNode Events of one node report are:
// the report is its node's agent's to write, as often as every 250 ms, and a node that
// claims pods it does not run (compromised, or confused) must not turn each write into an
// Event. A change of what it claims is told at most once an interval, the latest; the
// same claim is told once.
const cappedEventInterval = time.Minute

// cappedRecord is the last PodNotOnNode Event of one node report.
type cappedRecord struct {
	at   time.Time
	pods string // what it said, joined
}

// recordCapped records, on each node report of the namespace that claims pods not bound
// to its node, a Warning Event naming the node and those pods, coalesced per report
// (cappedEventInterval). It returns when to come back for an Event put off (zero: none).
func (r *CircuitBreakerReconciler) recordCapped(ctx context.Context, namespace string, capped map[string][]string) time.Duration {
	now := time.Now()
	var wait time.Duration
	var due []client.ObjectKey
	r.mu.Lock()
	for key, rec := range r.capped {
		if key.Namespace == namespace && len(capped[key.Name]) == 0 && now.Sub(rec.at) >= cappedEventInterval {
			delete(r.capped, key)
		}
	}
	for node, claims := range capped {
		key := client.ObjectKey{Namespace: namespace, Name: node}
		joined := strings.Join(claims, ";")
		rec := r.capped[key]
		if rec != nil && rec.pods == joined {
			continue
		}
		if rec != nil {
			if w := cappedEventInterval - now.Sub(rec.at); w > 0 {
				wait = earliest(wait, w)
				continue
			}
		}
		if r.capped == nil {
			r.capped = map[client.ObjectKey]*cappedRecord{}
		}
		r.capped[key] = &cappedRecord{at: now, pods: joined}
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
		r.Recorder.Eventf(&rep, nil, corev1.EventTypeWarning, resiliencev1alpha1.EventPodNotOnNode, "Count",
			"%s", counting.EventNote(fmt.Sprintf("This report claims pods that node %s does not run; each entry counts for the node's own pods alone: %s",
				key.Name, counting.JoinLimited(capped[key.Name]))))
	}
	return wait
}
