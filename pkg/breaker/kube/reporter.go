package kube

import (
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker/observe"
)

// reporter writes this pod's BreakerReport. It is a [observe.Observer] on every breaker of
// the registry: OnTransition only records the wanted entry and wakes the single writer
// goroutine, so a call that causes a transition never waits on the network. The writer
// coalesces: it applies the whole report as it stands, however many transitions came
// before, and writes nothing while the report is what the API server already holds.
//
// Its parts: entries.go turns transitions and configs into the entries to report,
// groups.go summarises breaker Groups into one entry each, writer.go is the writer
// goroutine, and wire.go spells the entries. Where the report goes is the sink's: the
// pod's own BreakerReport through the API server (sink_api.go), or the node's agent
// (sink_agent.go); what to send and when is the same for both.
type reporter struct {
	sink reportSink
	log  *slog.Logger

	wake chan struct{} // 1-buffered: one pending wake-up is enough, the writer reads the latest

	mu      sync.Mutex
	entries map[string]*entry // guarded by mu
	written []member          // guarded by mu: the report the receiver holds, by name
	names   []string          // guarded by mu: the names of written, in order
	synced  bool              // guarded by mu: written is what the receiver holds
	// resend: the receiver holds none of the report (a restarted node agent), so the
	// whole of it goes again at once, whatever the holds say.
	resend bool // guarded by mu
	// hold is the deferral of unearned changes (earned.go); holdFor, when set, draws
	// each hold's length. Unset, unearned changes go at once.
	hold    holdState // guarded by mu
	holdFor func() time.Duration
	// nextTraffic is the earliest a change of traffic alone goes out (traffic.go).
	nextTraffic time.Time // guarded by mu
	// taking is when the receiver first took each entry it holds; taken, when set, is
	// told of an entry it took for the first time, with no lock held (the concurrency
	// share, concurrency.go).
	taking map[string]time.Time // guarded by mu
	taken  func()

	writes, failures, rejected atomic.Int64
	lastErr                    atomic.Pointer[string]
}

var _ observe.Observer = (*reporter)(nil)

func newReporter(sink reportSink, log *slog.Logger) *reporter {
	return &reporter{
		sink:    sink,
		log:     log,
		wake:    make(chan struct{}, 1),
		entries: map[string]*entry{},
		holdFor: unearnedDelay,
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

// pending returns the report to write, in name order, and false when the receiver
// already holds it, when nothing was ever written and there is nothing to write, or when
// every change is unearned and its hold has not ended (earned.go). A report that goes out
// carries the latest traffic; a change of traffic alone goes out only when due and
// material (traffic.go). After resendAll the whole report goes at once.
func (r *reporter) pending() (names []string, ms []member, dirty bool) {
	r.refreshGroups()
	r.refreshTraffic()
	r.refreshCandidates()
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
	case r.resend && len(names) > 0:
		dirty = true
	case dirty && !r.held(names, ms):
	case r.synced && r.trafficDue(time.Now(), names):
	default:
		return names, ms, false
	}
	r.takeTraffic(names, ms)
	r.takeCandidates(names, ms)
	return names, ms, true
}

// markWritten records that the receiver holds the report of names and ms.
func (r *reporter) markWritten(names []string, ms []member) {
	r.mu.Lock()
	now := time.Now()
	r.trafficWritten(now, r.written, ms)
	r.names, r.written, r.synced, r.resend = names, ms, true, false
	r.hold.end()
	held := make(map[string]time.Time, len(names))
	fresh := false
	for _, name := range names {
		since, ok := r.taking[name]
		if !ok {
			since, fresh = now, true
		}
		held[name] = since
	}
	r.taking = held
	taken := r.taken
	r.mu.Unlock()
	if fresh && taken != nil {
		taken()
	}
}

// heldSince says whether the receiver holds an entry of name, and since when.
func (r *reporter) heldSince(name string) (bool, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	since, ok := r.taking[name]
	return ok, since
}

// resendAll makes the writer send the whole report again at once: its receiver, a node
// agent that restarted, holds none of it.
func (r *reporter) resendAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.resend = true
	r.signal()
}
