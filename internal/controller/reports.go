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

// member is one running pod's line about one breaker, as its BreakerReport says it.
type member struct {
	pod   string
	entry resiliencev1alpha1.BreakerReportEntry
	// since is entry.Since as the operator attests it: at most the skew after the
	// operator first saw the entry (attested).
	since time.Time
}

// namespaceReports is what the running pods of a namespace report, by breaker name,
// and the reports of pods that are gone.
type namespaceReports struct {
	byBreaker map[string][]member
	// gone are the reports whose pod no longer exists (or is another pod of the same
	// name): the garbage collector deletes them in a real cluster, in its own time.
	gone []resiliencev1alpha1.BreakerReport
	// oddShape names, by breaker, the pods whose entry has the shape (breaker Group or
	// plain) the other pods' entries do not have: left out of byBreaker (oddShapes).
	oddShape map[string][]string
}

// readReports reads the namespace's BreakerReports and keeps the ones of running pods.
// Reports of pods in phase Succeeded or Failed count for nothing. A pod missing from the
// cache, or there under another UID than its report's owner, is confirmed with a live
// read first.
func (r *CircuitBreakerReconciler) readReports(ctx context.Context, namespace string) (namespaceReports, error) {
	out := namespaceReports{byBreaker: map[string][]member{}}
	var reports resiliencev1alpha1.BreakerReportList
	// Read-only use: no copy of every report per reconcile.
	if err := r.List(ctx, &reports, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
		return out, fmt.Errorf("list BreakerReports: %w", err)
	}
	if len(reports.Items) == 0 {
		return out, nil
	}
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
		return out, fmt.Errorf("list Pods: %w", err)
	}
	byName := make(map[string]*corev1.Pod, len(pods.Items))
	for i := range pods.Items {
		byName[pods.Items[i].Name] = &pods.Items[i]
	}
	for i := range reports.Items {
		rep := &reports.Items[i]
		pod := byName[rep.Name]
		if pod == nil || !ownedBy(rep, pod.UID) {
			// Confirmed around the cache: a new pod can report before the cache has
			// seen it, and a pod re-created under its name (a StatefulSet's) before the
			// cache has seen the old one go; its report, taken for the old pod's, would
			// be deleted, and its agent writes it again only when an entry changes.
			live, err := r.livePod(ctx, namespace, rep.Name)
			if err != nil {
				return out, err
			}
			pod = live
		}
		switch {
		case pod == nil || !ownedBy(rep, pod.UID):
			out.gone = append(out.gone, *rep)
			continue
		case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
			continue
		}
		for _, m := range membersOf(rep, r.seen.firstSeen(rep, r.now())) {
			out.byBreaker[m.entry.Name] = append(out.byBreaker[m.entry.Name], m)
		}
	}
	for name, members := range out.byBreaker {
		kept, odd := oddShapes(members)
		if len(odd) == 0 {
			continue
		}
		out.byBreaker[name] = kept
		if out.oddShape == nil {
			out.oddShape = map[string][]string{}
		}
		out.oddShape[name] = odd
	}
	return out, nil
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
