package kube

import (
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
)

// reporter writes this pod's BreakerReport. It is a [breaker.Observer] on every breaker of
// the registry: OnTransition only records the wanted entry and wakes the single writer
// goroutine, so a call that causes a transition never waits on the network. The writer
// coalesces: it applies the whole report as it stands, however many transitions came
// before, and writes nothing while the report is what the API server already holds.
//
// Its parts: entries.go turns transitions and configs into the entries to report,
// groups.go summarises breaker Groups into one entry each, writer.go is the writer
// goroutine, and wire.go spells the report as the API server stores it.
type reporter struct {
	reports   dynamic.NamespaceableResourceInterface
	pods      kubernetes.Interface // reads the Pod's UID when podUID is not given
	namespace string
	pod       string
	log       *slog.Logger

	wake chan struct{} // 1-buffered: one pending wake-up is enough, the writer reads the latest

	mu      sync.Mutex
	entries map[string]*entry // guarded by mu
	podUID  types.UID         // guarded by mu; empty until known
	written []member          // guarded by mu: the report the API server holds, by name
	names   []string          // guarded by mu: the names of written, in order
	synced  bool              // guarded by mu: written is what the API server holds
	// hold is the deferral of unearned changes (earned.go); holdFor, when set, draws
	// each hold's length. Unset, unearned changes go at once.
	hold    holdState // guarded by mu
	holdFor func() time.Duration
	// nextTraffic is the earliest a change of traffic alone goes out (traffic.go).
	nextTraffic time.Time // guarded by mu

	writes, failures, rejected atomic.Int64
	lastErr                    atomic.Pointer[string]
}

var _ breaker.Observer = (*reporter)(nil)

func newReporter(dc dynamic.Interface, cs kubernetes.Interface, namespace, pod string, podUID types.UID, log *slog.Logger) *reporter {
	return &reporter{
		reports:   dc.Resource(breakerReports),
		pods:      cs,
		namespace: namespace,
		pod:       pod,
		podUID:    podUID,
		log:       log,
		wake:      make(chan struct{}, 1),
		entries:   map[string]*entry{},
		holdFor:   unearnedDelay,
	}
}

// signal wakes the writer. Caller holds mu.
func (r *reporter) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// flush wakes the writer after configure and unconfigure calls; it writes only if the
// report changed.
func (r *reporter) flush() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.signal()
}

// pending returns the report to write, in name order, and false when the API server
// already holds it, when nothing was ever written and there is nothing to write, or when
// every change is unearned and its hold has not ended (earned.go). A report that goes out
// carries the latest traffic; a change of traffic alone goes out only when due and
// material (traffic.go).
func (r *reporter) pending() (names []string, ms []member, dirty bool) {
	r.refreshGroups()
	r.refreshTraffic()
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, e := range r.entries {
		if e.reported && e.known {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	ms = make([]member, len(names))
	for i, name := range names {
		ms[i] = r.entries[name].want
	}
	if !r.synced {
		// Nothing written yet: a pod that reports no breaker has no report to write.
		dirty = len(names) > 0
	} else {
		dirty = !slices.Equal(names, r.names) || !slices.Equal(ms, r.written)
	}
	switch {
	case dirty && !r.held(names, ms):
	case r.synced && r.trafficDue(time.Now(), names):
	default:
		return names, ms, false
	}
	r.takeTraffic(names, ms)
	return names, ms, true
}

// markWritten records that the API server holds the report of names and ms.
func (r *reporter) markWritten(names []string, ms []member) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.trafficWritten(time.Now(), r.written, ms)
	r.names, r.written, r.synced = names, ms, true
	r.hold.end()
}
