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
)

// member is one running pod's line about one breaker, as its report says it (its own
// BreakerReport, or its line in its node's NodeBreakerReport).
type member struct {
	pod   string
	entry resiliencev1alpha1.BreakerReportEntry
	// since is entry.Since as the operator attests it: at most the skew after the
	// operator first saw the entry (attested).
	since time.Time
	// revision is the pod's revision, from its labels in the pod cache (revisions.go);
	// "" when it carries none.
	revision string
}

// namespaceReports is what the running pods of a namespace report, by breaker name,
// and the reports of pods that are gone.
type namespaceReports struct {
	byBreaker map[string][]member
	// snapshots are the index's snapshots of byBreaker's members, which remember their
	// aggregate (view); a breaker without one is aggregated afresh.
	snapshots map[string]*memberSnapshot
	// gone are the reports whose pod no longer exists (or is another pod of the same
	// name): the garbage collector deletes them in a real cluster, in its own time.
	gone []resiliencev1alpha1.BreakerReport
	// oddShape names, by breaker, the pods whose entry has the shape (breaker Group or
	// plain) the other pods' entries do not have: left out of byBreaker (oddShapes).
	oddShape map[string][]string
	// misbound names, by node, the pods its NodeBreakerReport claims that are not bound
	// to it: their lines count for nothing.
	misbound map[string][]string
}

// view is what the members of cb add up to (aggregate).
func (n namespaceReports) view(cb *resiliencev1alpha1.CircuitBreaker) breakerView {
	if s := n.snapshots[cb.Name]; s != nil {
		return s.view(cb)
	}
	v := aggregate(cb, n.byBreaker[cb.Name])
	v.oddShape = n.oddShape[cb.Name]
	return v
}

// readReports returns what the namespace's pods report of the breakers, from the index
// (memberIndex) after deriving again the pods that changed since the last read, and when
// to read again for an agent's grace that ends (zero: no need).
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
		results := make(map[string]derived, len(dirty))
		for pod, nodes := range dirty {
			res, err := d.derive(ctx, pod, nodes)
			if err != nil {
				// What is not derived yet stays dirty for the retry.
				for p := range dirty {
					if _, done := results[p]; !done {
						r.index.markReport(namespace, p)
					}
				}
				r.index.apply(ns, results)
				return namespaceReports{}, 0, err
			}
			results[pod] = res
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
		ns.dirty[reports.Items[i].Name] = true
	}
	for i := range nodeReports.Items {
		rep := &nodeReports.Items[i]
		for k := range rep.Pods {
			ns.dirty[rep.Pods[k].Name] = true
			ns.hint(rep.Pods[k].Name, rep.NodeName)
		}
	}
	ns.synced = true
	return nil
}

// oddShapes splits a breaker's members by the shape of their entries: a breaker Group's
// (keys set) or a plain breaker's. One breaker has one shape in every pod that runs the
// same code, and the shape decides how its status adds up (a Group shares no fleet
// verdict), so one pod must not switch it by writing the other shape: the shape most
// pods report is kept, plain on a tie (the shape the spec's scope describes), and the
// pods of the other are returned, sorted, to be left out and named.
func oddShapes(members []member) (kept []member, odd []string) {
	groups := 0
	for i := range members {
		if members[i].entry.Keys != nil {
			groups++
		}
	}
	if groups == 0 || groups == len(members) {
		return members, nil
	}
	keepGroups := groups > len(members)-groups
	kept = make([]member, 0, len(members))
	for _, m := range members {
		if (m.entry.Keys != nil) == keepGroups {
			kept = append(kept, m)
		} else {
			odd = append(odd, m.pod)
		}
	}
	slices.Sort(odd)
	return kept, odd
}

// ownedBy reports whether the report belongs to the pod of that UID. A report that names
// no Pod owner is taken as its namesake's: the admission policy already made sure a pod
// wrote only its own.
func ownedBy(rep *resiliencev1alpha1.BreakerReport, uid types.UID) bool {
	for _, o := range rep.OwnerReferences {
		if o.Kind == "Pod" && o.APIVersion == "v1" {
			return o.UID == uid
		}
	}
	return true
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
			"Deleted the reports of %d pods that no longer exist: %s", len(pods), joinLimited(pods))
	}
	return nil
}
