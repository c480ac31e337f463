package controller

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// The watch event handlers of the two controllers: what each event marks in the index
// (memberIndex) and records of first sight (observations), and which namespaces it
// reconciles.

// coalesced enqueues the namespace of each event so that its reconciles start at least
// delay apart: the first event after a quiet delay starts one at once (the first report of
// an incident is news), and the events that follow within delay of a reconcile join the
// next one, delay after it, so that the reports of a burst are read together.
func coalesced(delay time.Duration) handler.EventHandler {
	var (
		mu  sync.Mutex
		due = map[reconcile.Request]time.Time{} // guarded by mu: each namespace's last reconcile asked for
	)
	add := func(o client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		req, now := namespaceRequest(o), time.Now()
		mu.Lock()
		defer mu.Unlock()
		if len(due) > 1024 {
			// An entry a delay old acts as no entry: forget those of quiet namespaces.
			for r, t := range due {
				if !now.Before(t.Add(delay)) {
					delete(due, r)
				}
			}
		}
		last, ok := due[req]
		switch {
		case !ok || !now.Before(last.Add(delay)):
			due[req] = now
			q.Add(req)
		case now.Before(last):
			q.AddAfter(req, last.Sub(now)) // joins the reconcile already due
		default:
			next := last.Add(delay)
			due[req] = next
			q.AddAfter(req, next.Sub(now))
		}
	}
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(e.Object, q)
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(e.ObjectNew, q)
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(e.Object, q)
		},
		GenericFunc: func(_ context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(e.Object, q)
		},
	}
}

// indexing records when the watch delivers each report entry (observations) and marks
// the pods whose reports changed dirty in the index, then passes the event on to next.
// Both controllers watch reports; the first to be told records, the other finds the
// entry known, and either order marks the same pods.
func (r *CircuitBreakerReconciler) indexing(next handler.EventHandler) handler.EventHandler {
	changed := func(o client.Object, deleted bool) {
		key := client.ObjectKeyFromObject(o)
		switch rep := o.(type) {
		case *resiliencev1alpha1.BreakerReport:
			if deleted {
				r.seen.forget(key)
			} else {
				r.seen.observe(rep, r.now())
			}
			r.index.mark(rep.Namespace, carrier{pod: rep.Name})
		case *resiliencev1alpha1.NodeBreakerReport:
			if deleted {
				r.seen.forgetNode(key)
			} else {
				r.seen.observeNode(rep, r.now())
			}
			r.index.mark(rep.Namespace, carrier{node: rep.Name})
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			changed(e.Object, false)
			next.Create(ctx, e, q)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			changed(e.ObjectNew, false)
			next.Update(ctx, e, q)
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			changed(e.Object, true)
			next.Delete(ctx, e, q)
		},
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			next.Generic(ctx, e, q)
		},
	}
}

// podEvents reconciles a namespace when one of the pods its reports speak for appears,
// is bound to a node, ends or goes (what decides whether its report counts) or is
// relabelled to another revision (status.revisions), and every
// namespace where a node's report counts pods when that node's agent appears, goes or
// changes its readiness. Other pods' events, most of a cluster's, cost a map lookup.
func (r *CircuitBreakerReconciler) podEvents() handler.EventHandler {
	handle := func(old, pod *corev1.Pod, deleted bool, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		if pod == nil {
			return
		}
		if r.isNodeAgent(pod) && (old == nil || agentMoved(old, pod)) {
			node := pod.Spec.NodeName
			if node == "" && old != nil {
				node = old.Spec.NodeName
			}
			for _, ns := range r.index.markAgent(node, deleted, r.now()) {
				q.Add(namespaceKey(ns))
			}
		}
		if old != nil && old.Status.Phase == pod.Status.Phase && old.Spec.NodeName == pod.Spec.NodeName &&
			resiliencev1alpha1.RevisionOf(old.Labels) == resiliencev1alpha1.RevisionOf(pod.Labels) {
			return
		}
		node := pod.Spec.NodeName
		if node == "" && old != nil {
			node = old.Spec.NodeName
		}
		if r.index.markPod(pod.Namespace, pod.Name, node) {
			q.Add(namespaceRequest(pod))
		}
	}
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			pod, _ := e.Object.(*corev1.Pod)
			handle(nil, pod, false, q)
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			old, _ := e.ObjectOld.(*corev1.Pod)
			pod, _ := e.ObjectNew.(*corev1.Pod)
			if old != nil {
				handle(old, pod, false, q)
			}
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			pod, _ := e.Object.(*corev1.Pod)
			handle(nil, pod, true, q)
		},
	}
}

// agentMoved reports whether an agent pod's update changes whether its node counts: its
// Ready condition, its node or its phase.
func agentMoved(old, pod *corev1.Pod) bool {
	a, b := podReady(old), podReady(pod)
	sameReady := (a == nil) == (b == nil) && (a == nil || (a.Status == b.Status && a.LastTransitionTime.Equal(&b.LastTransitionTime)))
	return !sameReady || old.Spec.NodeName != pod.Spec.NodeName || old.Status.Phase != pod.Status.Phase
}
