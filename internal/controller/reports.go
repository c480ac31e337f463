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
	// since is entry.Since, except that a time more than maxClockSkew after the API
	// server's record of the report's last write counts as that write time: a node whose
	// clock runs ahead cannot date a verdict in the future and pin the fleet to it.
	since time.Time
}

// maxClockSkew is how far ahead of the API server's clock a report's times may run.
const maxClockSkew = 2 * time.Second

// namespaceReports is what the running pods of a namespace report, by breaker name,
// and the reports of pods that are gone.
type namespaceReports struct {
	byBreaker map[string][]member
	// gone are the reports whose pod no longer exists (or is another pod of the same
	// name): the garbage collector deletes them in a real cluster, in its own time.
	gone []resiliencev1alpha1.BreakerReport
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
		for _, m := range membersOf(rep) {
			out.byBreaker[m.entry.Name] = append(out.byBreaker[m.entry.Name], m)
		}
	}
	return out, nil
}

// membersOf returns the report's entries as members, each since clamped to the API
// server's record of the report's last write.
func membersOf(rep *resiliencev1alpha1.BreakerReport) []member {
	written := lastWrite(rep)
	out := make([]member, 0, len(rep.Breakers))
	for _, e := range rep.Breakers {
		since := e.Since.Time
		if !written.IsZero() && since.After(written.Add(maxClockSkew)) {
			since = written
		}
		out = append(out, member{pod: rep.Name, entry: e, since: since})
	}
	return out
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

// lastWrite is the API server's record of when the report was last written: the latest
// time among its managedFields (whole seconds).
func lastWrite(rep *resiliencev1alpha1.BreakerReport) time.Time {
	var t time.Time
	for _, f := range rep.ManagedFields {
		if f.Time != nil && f.Time.After(t) {
			t = f.Time.Time
		}
	}
	return t
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
