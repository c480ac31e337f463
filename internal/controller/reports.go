package controller

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/counting"
)

// readReports returns what the namespace's pods report of the breakers, from the index
// (entryIndex) after deriving again the carriers that changed since the last read, and
// when to read again for an agent's grace that ends (zero: no need).
func (r *CircuitBreakerReconciler) readReports(ctx context.Context, namespace string, breakers []resiliencev1alpha1.CircuitBreaker) (namespaceReports, time.Duration, error) {
	ns := r.index.namespaceFor(namespace)
	ns.refresh.Lock()
	defer ns.refresh.Unlock()
	if err := r.syncNamespace(ctx, namespace, ns); err != nil {
		return namespaceReports{}, 0, err
	}
	now := r.now()
	dirty := r.index.takeDirty(ns, now)
	if len(dirty) > 0 {
		d := deriver{r: r, namespace: namespace, now: now}
		results := make(map[carrier]derived, len(dirty))
		for _, c := range dirty {
			res, err := d.derive(ctx, c)
			if err != nil {
				// What is not derived yet stays dirty for the retry.
				for _, left := range dirty {
					if _, done := results[left]; !done {
						r.index.mark(namespace, left)
					}
				}
				r.index.apply(ns, results)
				return namespaceReports{}, 0, err
			}
			results[c] = res
		}
		r.index.apply(ns, results)
	}
	names := make([]string, len(breakers))
	for i := range breakers {
		names[i] = breakers[i].Name
	}
	out, next := r.index.read(ns, names)
	var wait time.Duration
	if !next.IsZero() {
		wait = max(next.Sub(now), time.Millisecond)
	}
	return out, wait, nil
}

// derive derives one carrier again.
func (d *deriver) derive(ctx context.Context, c carrier) (derived, error) {
	if c.node != "" {
		n, err := d.deriveNode(ctx, c.node)
		if err != nil || n == nil {
			return derived{}, err
		}
		return derived{entries: n.entries, exists: true, capped: n.capped, agentUntil: n.agentUntil}, nil
	}
	p, err := d.derivePod(ctx, c.pod)
	if err != nil || p == nil {
		return derived{}, err
	}
	return derived{entries: p.entries, exists: true, gone: p.gone}, nil
}

// syncNamespace marks every report of the namespace dirty the first time the namespace is
// read, from the cache's lists: the watch events mark the rest.
func (r *CircuitBreakerReconciler) syncNamespace(ctx context.Context, namespace string, ns *namespaceIndex) error {
	r.index.mu.Lock()
	synced := ns.synced
	r.index.mu.Unlock()
	if synced {
		return nil
	}
	var reports resiliencev1alpha1.BreakerReportList
	if err := r.List(ctx, &reports, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("list BreakerReports: %w", err)
	}
	var nodeReports resiliencev1alpha1.NodeBreakerReportList
	if err := r.List(ctx, &nodeReports, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("list NodeBreakerReports: %w", err)
	}
	r.index.mu.Lock()
	defer r.index.mu.Unlock()
	for i := range reports.Items {
		ns.dirty[carrier{pod: reports.Items[i].Name}] = true
	}
	for i := range nodeReports.Items {
		ns.dirty[carrier{node: nodeReports.Items[i].Name}] = true
	}
	ns.synced = true
	return nil
}

// livePod reads a pod around the cache; nil when it does not exist.
func (r *CircuitBreakerReconciler) livePod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	key := types.NamespacedName{Namespace: namespace, Name: name}
	var pod corev1.Pod
	err := r.APIReader.Get(ctx, key, &pod)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("look up pod %s: %w", key, err)
	}
	return &pod, nil
}

// pruneReports deletes the reports of pods that are gone, and records, on each breaker
// they spoke of, one Normal Event naming those pods. A report written meanwhile (by a new
// pod of the same name) is kept: the delete carries its UID and resourceVersion.
func (r *CircuitBreakerReconciler) pruneReports(ctx context.Context, breakers []resiliencev1alpha1.CircuitBreaker, gone []resiliencev1alpha1.BreakerReport) error {
	if len(gone) == 0 {
		return nil
	}
	log := logf.FromContext(ctx)
	pruned := map[string][]string{} // breaker name → pods
	for i := range gone {
		rep := &gone[i]
		err := r.Delete(ctx, rep, client.Preconditions{UID: &rep.UID, ResourceVersion: &rep.ResourceVersion})
		switch {
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
			continue // deleted already, or written since: the next reconcile judges it again
		case err != nil:
			return fmt.Errorf("delete BreakerReport %s/%s: %w", rep.Namespace, rep.Name, err)
		}
		log.V(1).Info("Deleted the report of a pod that is gone", "breakerReport", rep.Name)
		for _, e := range rep.Breakers {
			pruned[e.Name] = append(pruned[e.Name], rep.Name)
		}
	}
	for i := range breakers {
		cb := &breakers[i]
		pods := pruned[cb.Name]
		if len(pods) == 0 {
			continue
		}
		slices.Sort(pods)
		r.Recorder.Eventf(cb, nil, corev1.EventTypeNormal, resiliencev1alpha1.EventMemberPruned, "Prune",
			"Deleted the reports of %d pods that no longer exist: %s", len(pods), counting.JoinLimited(pods))
	}
	return nil
}
