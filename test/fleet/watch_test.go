package fleet

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// The kinds whose writes the harness counts: each ADDED, MODIFIED or DELETED
// watch event is one write the API server accepted.
const (
	kindCircuitBreaker = "CircuitBreaker"
	kindConfigMap      = "ConfigMap"
	kindBreakerReport  = breakerconfig.ReportKind
	// kindNodeBreakerReport is counted when the API server serves it (docs/design.md §9).
	kindNodeBreakerReport = breakerconfig.NodeReportKind
)

var (
	circuitBreakersGVR = schema.GroupVersionResource{Group: breakerconfig.Group, Version: breakerconfig.Version, Resource: "circuitbreakers"}
	breakerReportsGVR  = schema.GroupVersionResource{Group: breakerconfig.Group, Version: breakerconfig.Version, Resource: breakerconfig.ReportResource}
	configMapsGVR      = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

	nodeBreakerReportsGVR = schema.GroupVersionResource{Group: breakerconfig.Group, Version: breakerconfig.Version, Resource: breakerconfig.NodeReportResource}
)

// counts is a snapshot of the writes seen per kind.
type counts map[string]int64

func (c counts) minus(o counts) counts {
	out := counts{}
	for k, v := range c {
		out[k] = v - o[k]
	}
	return out
}

func (c counts) total() int64 {
	var n int64
	for _, v := range c {
		n += v
	}
	return n
}

// String lists the kinds in a fixed order, e.g. "CircuitBreaker 3, ConfigMap 0".
func (c counts) String() string {
	kinds := make([]string, 0, len(c))
	for k := range c {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	parts := make([]string, 0, len(kinds))
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s %d", k, c[k]))
	}
	return strings.Join(parts, ", ")
}

// seen is one version of an object as the watch delivered it.
type seen struct {
	obj *unstructured.Unstructured
	at  time.Time // when the event arrived
	seq int64     // events of this object so far, this one included
}

// tracker counts the write events of every watched kind, keeps the latest
// CircuitBreakers, and wakes whoever waits for one to reach a state.
type tracker struct {
	mu       sync.Mutex
	perKind  map[string]int64
	last     time.Time // last event of any counted kind
	breakers map[string]seen
	changed  chan struct{} // closed and replaced on every event
}

func newTracker(kinds ...string) *tracker {
	t := &tracker{perKind: map[string]int64{}, breakers: map[string]seen{}, changed: make(chan struct{})}
	for _, k := range kinds {
		t.perKind[k] = 0
	}
	return t
}

func (t *tracker) record(kind string, typ watch.EventType, obj *unstructured.Unstructured, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.perKind[kind]++
	t.last = at
	if kind == kindCircuitBreaker && obj != nil {
		s := t.breakers[obj.GetName()]
		s.seq++
		s.at = at
		s.obj = obj
		if typ == watch.Deleted {
			s.obj = nil
		}
		t.breakers[obj.GetName()] = s
	}
	close(t.changed)
	t.changed = make(chan struct{})
}

// seed records the listed state without counting it as writes.
func (t *tracker) seed(kind string, list *unstructured.UnstructuredList) {
	if kind != kindCircuitBreaker {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range list.Items {
		o := list.Items[i]
		s := t.breakers[o.GetName()]
		s.obj, s.at = &o, time.Now()
		t.breakers[o.GetName()] = s
	}
}

func (t *tracker) snapshot() counts {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := counts{}
	for k, v := range t.perKind {
		out[k] = v
	}
	return out
}

func (t *tracker) lastEvent() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.last
}

func (t *tracker) breaker(name string) seen {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.breakers[name]
}

func (t *tracker) wake() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.changed
}

// waitFor waits until a version of the CircuitBreaker name that arrived at or
// after since satisfies cond, or until the deadline. It returns the version
// that did (or the last one seen) and whether it did; the version's at is when
// its event arrived. A version from before since does not count: a state the
// object already had says nothing about the step being timed.
func (t *tracker) waitFor(ctx context.Context, name string, since, deadline time.Time, cond func(*unstructured.Unstructured) bool) (seen, bool) {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		wake := t.wake()
		s := t.breaker(name)
		if s.obj != nil && !s.at.Before(since) && cond(s.obj) {
			return s, true
		}
		select {
		case <-wake:
		case <-timer.C:
			return t.breaker(name), false
		case <-ctx.Done():
			return t.breaker(name), false
		}
	}
}

// quiet waits until no counted write has been seen for quietFor, nor has
// busy (the last moment something else was busy) been within it, or until
// deadline; it reports whether it got there.
func (t *tracker) quiet(ctx context.Context, quietFor time.Duration, deadline time.Time, busy func() time.Time) bool {
	for {
		last := t.lastEvent()
		if b := busy(); b.After(last) {
			last = b
		}
		since := time.Since(last)
		if since >= quietFor {
			return true
		}
		if time.Now().Add(quietFor - since).After(deadline) {
			return false
		}
		select {
		case <-time.After(min(quietFor-since, 500*time.Millisecond)):
		case <-ctx.Done():
			return false
		}
	}
}

// watchKind lists then watches gvr in ns until ctx ends, recording every
// event as kind. listed is closed once the first list is in. A watch that
// ends is resumed from the last resourceVersion seen; one that expired (410)
// re-lists, and the writes in the gap are lost (logged).
func (t *tracker) watchKind(ctx context.Context, dc dynamic.Interface, gvr schema.GroupVersionResource, ns, kind string, listed chan<- struct{}, logf func(string, ...any)) {
	res := dc.Resource(gvr).Namespace(ns)
	rv := ""
	first := true
	for ctx.Err() == nil {
		if rv == "" {
			list, err := res.List(ctx, metav1.ListOptions{})
			if err != nil {
				logf("list %s: %v", gvr.Resource, err)
				time.Sleep(time.Second)
				continue
			}
			t.seed(kind, list)
			rv = list.GetResourceVersion()
			if first {
				close(listed)
				first = false
			}
		}
		w, err := res.Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
		if err != nil {
			if apierrors.IsGone(err) || apierrors.IsResourceExpired(err) {
				logf("watch %s: %v; re-listing (writes in the gap are not counted)", gvr.Resource, err)
				rv = ""
			}
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for ev := range w.ResultChan() {
			at := time.Now()
			switch ev.Type {
			case watch.Added, watch.Modified, watch.Deleted:
				obj, _ := ev.Object.(*unstructured.Unstructured)
				if obj != nil {
					rv = obj.GetResourceVersion()
				}
				t.record(kind, ev.Type, obj, at)
			case watch.Bookmark:
				if obj, ok := ev.Object.(*unstructured.Unstructured); ok {
					rv = obj.GetResourceVersion()
				}
			case watch.Error:
				err := apierrors.FromObject(ev.Object)
				if apierrors.IsGone(err) || apierrors.IsResourceExpired(err) {
					logf("watch %s: %v; re-listing (writes in the gap are not counted)", gvr.Resource, err)
					rv = ""
				}
			}
		}
		w.Stop()
	}
}

// Readers of the CircuitBreaker's public status (docs/design.md §3).

func memberCount(o *unstructured.Unstructured, field string) int64 {
	v, _, _ := unstructured.NestedInt64(o.Object, "status", "memberCounts", field)
	return v
}

// condition returns the status of the condition of type typ, if it describes
// the object's current generation.
func condition(o *unstructured.Unstructured, typ string) string {
	conds, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if !ok || m["type"] != typ {
			continue
		}
		if g, ok := m["observedGeneration"].(int64); ok && g != o.GetGeneration() {
			return "Stale"
		}
		s, _ := m["status"].(string)
		return s
	}
	return ""
}

func state(o *unstructured.Unstructured) string {
	s, _, _ := unstructured.NestedString(o.Object, "status", "state")
	return s
}

// describe is a one-line summary of a CircuitBreaker's status, for notes.
func describe(o *unstructured.Unstructured) string {
	if o == nil {
		return "no object"
	}
	return fmt.Sprintf("state %q, reporting %d, closed %d, open %d, halfOpen %d, Open=%s",
		state(o), memberCount(o, "reporting"), memberCount(o, "closed"), memberCount(o, "open"), memberCount(o, "halfOpen"), condition(o, "Open"))
}
