package controller

import (
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/conversion"
	"k8s.io/apimachinery/pkg/types"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/counting"
)

// entryIndex holds, per namespace and per breaker, the entries that count: what each
// carrier (a node's report, a pod's own report) says, kept between reconciles so that a
// reconcile reads the entries it needs without listing every report, and aggregates again
// only the breakers whose entries changed.
//
// It is level-based. The watch events of BreakerReports, NodeBreakerReports and Pods only
// mark carriers dirty (cheap, in any order, any number of times); a reconcile then derives
// each dirty carrier again from the cache as it stands and applies the result here. What
// an event marks is thus never lost to events delivered out of order between the two
// controllers' handlers, and what the cache holds is always what counts.
//
// Safe for concurrent use.
type entryIndex struct {
	mu         sync.Mutex
	namespaces map[string]*namespaceIndex // guarded by mu
	// agentMissing is since when each node has been known to have no agent pod at all
	// (agentCounted's missingSince); guarded by mu.
	agentMissing map[string]time.Time
}

// carrier names what an entry came from: a node's report, or a pod's own.
type carrier struct{ node, pod string }

// namespaceIndex is the index of one namespace.
type namespaceIndex struct {
	// refresh serializes the namespace's refreshes: a reconcile that finds nothing dirty
	// must wait for the one deriving what an event marked, or it reads the entries from
	// before the event and no later event comes to correct it.
	refresh sync.Mutex

	// The rest is guarded by entryIndex.mu.

	// synced: the namespace's reports were all marked once, from a list of the cache (a
	// reconciler started without watches, or before their first events, misses none).
	synced bool
	dirty  map[carrier]bool
	// carriers is what each carrier counts for, by breaker name.
	carriers map[carrier]map[string][]counting.Entry
	breakers map[string]*breakerEntries
	gone     map[string]*resiliencev1alpha1.BreakerReport // by pod name: reports to delete
	capped   map[string][]string                          // by node: what the cache bounded
	// deadlines is when each node's agent's grace ends: the node is derived again then.
	deadlines map[string]time.Time
}

// breakerEntries is one breaker's entries, by carrier, and the snapshot a reconcile reads.
type breakerEntries struct {
	entries map[carrier][]counting.Entry
	// order is entries' carriers, sorted (compareCarriers): kept as carriers come and go,
	// so that a snapshot copies the entries in order without sorting a thousand node
	// reports each time one of them changes.
	order []carrier
	snap  *entrySnapshot // nil once the entries changed
}

// set makes c's entries say entries.
func (b *breakerEntries) set(c carrier, entries []counting.Entry) {
	if _, ok := b.entries[c]; !ok {
		i, _ := slices.BinarySearchFunc(b.order, c, compareCarriers)
		b.order = slices.Insert(b.order, i, c)
	}
	b.entries[c] = entries
	b.snap = nil
}

// drop takes c's entries out.
func (b *breakerEntries) drop(c carrier) {
	if i, ok := slices.BinarySearchFunc(b.order, c, compareCarriers); ok {
		b.order = slices.Delete(b.order, i, i+1)
	}
	delete(b.entries, c)
	b.snap = nil
}

// compareCarriers orders carriers by node, then by pod.
func compareCarriers(a, b carrier) int {
	if c := strings.Compare(a.node, b.node); c != 0 {
		return c
	}
	return strings.Compare(a.pod, b.pod)
}

// entrySnapshot is a breaker's entries at one moment, shared by the reconciles that read
// them: never changed once made.
type entrySnapshot struct {
	entries  []counting.Entry // without the carriers of the odd shape
	oddShape []string

	mu   sync.Mutex
	memo *counting.View // guarded by mu: the aggregate for memoFor
	// memoFor is the breaker the memo is for, by UID and generation: all of the
	// CircuitBreaker that Aggregate reads.
	memoFor struct {
		uid        types.UID
		generation int64
	}
}

// view returns Aggregate's answer for cb over the snapshot, computed once per snapshot and
// generation of cb.
func (s *entrySnapshot) view(cb *resiliencev1alpha1.CircuitBreaker) counting.View {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.memo == nil || s.memoFor.uid != cb.UID || s.memoFor.generation != cb.Generation {
		v := counting.Aggregate(cb, s.entries)
		v.OddShape = s.oddShape
		s.memo = &v
		s.memoFor.uid, s.memoFor.generation = cb.UID, cb.Generation
	}
	return *s.memo
}

// namespace returns the namespace's index, made when missing. i.mu must be held.
func (i *entryIndex) namespace(name string) *namespaceIndex {
	if i.namespaces == nil {
		i.namespaces = map[string]*namespaceIndex{}
	}
	ns := i.namespaces[name]
	if ns == nil {
		ns = &namespaceIndex{
			dirty: map[carrier]bool{}, carriers: map[carrier]map[string][]counting.Entry{},
			breakers: map[string]*breakerEntries{}, gone: map[string]*resiliencev1alpha1.BreakerReport{},
			capped: map[string][]string{}, deadlines: map[string]time.Time{},
		}
		i.namespaces[name] = ns
	}
	return ns
}

// namespaceFor returns the namespace's index, made when missing.
func (i *entryIndex) namespaceFor(name string) *namespaceIndex {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.namespace(name)
}

// mark marks a carrier of the namespace dirty.
func (i *entryIndex) mark(namespace string, c carrier) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.namespace(namespace).dirty[c] = true
}

// markPod marks dirty what a pod's change may change: its own report, if the index holds
// one, and its node's, if the index holds one. It says whether it marked anything: a pod
// nothing reports for changes nothing.
func (i *entryIndex) markPod(namespace, pod, node string) bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	ns := i.namespaces[namespace]
	if ns == nil {
		return false
	}
	marked := false
	for _, c := range []carrier{{pod: pod}, {node: node}} {
		if c == (carrier{}) {
			continue
		}
		if _, known := ns.carriers[c]; known || ns.dirty[c] || (c.pod != "" && ns.gone[c.pod] != nil) {
			ns.dirty[c] = true
			marked = true
		}
	}
	return marked
}

// markAgent marks dirty node's report in every namespace, after a change of the node's
// agent pods; gone says the node was seen to lose one. It returns the namespaces marked.
func (i *entryIndex) markAgent(node string, gone bool, now time.Time) []string {
	i.mu.Lock()
	defer i.mu.Unlock()
	if gone {
		if i.agentMissing == nil {
			i.agentMissing = map[string]time.Time{}
		}
		if _, ok := i.agentMissing[node]; !ok {
			i.agentMissing[node] = now
		}
	}
	var marked []string
	for name, ns := range i.namespaces {
		if _, ok := ns.carriers[carrier{node: node}]; ok {
			ns.dirty[carrier{node: node}] = true
			marked = append(marked, name)
		}
	}
	slices.Sort(marked)
	return marked
}

// missingSince returns since when node has been known to have no agent pod, recording now
// when it was not known yet; a node found with an agent is forgotten.
func (i *entryIndex) missingSince(node string, hasAgent bool, now time.Time) time.Time {
	i.mu.Lock()
	defer i.mu.Unlock()
	if hasAgent {
		delete(i.agentMissing, node)
		return time.Time{}
	}
	if i.agentMissing == nil {
		i.agentMissing = map[string]time.Time{}
	}
	since, ok := i.agentMissing[node]
	if !ok {
		since = now
		i.agentMissing[node] = since
	}
	return since
}

// takeDirty returns the carriers to derive again and clears them: the nodes whose agent's
// grace ended by now are among them.
func (i *entryIndex) takeDirty(ns *namespaceIndex, now time.Time) []carrier {
	i.mu.Lock()
	defer i.mu.Unlock()
	for node, end := range ns.deadlines {
		if !now.Before(end) {
			ns.dirty[carrier{node: node}] = true
			delete(ns.deadlines, node)
		}
	}
	out := make([]carrier, 0, len(ns.dirty))
	for c := range ns.dirty {
		out = append(out, c)
	}
	clear(ns.dirty)
	return out
}

// derived is one carrier's derivation: what counts of it (nil: it has no report), the
// report to delete, what the cache bounded, and when its node's agent's grace ends.
type derived struct {
	entries    []counting.Entry
	exists     bool
	gone       *resiliencev1alpha1.BreakerReport
	capped     []string
	agentUntil time.Time
}

// apply stores the derivations, keeping the breakers whose entries did not change as they
// were, snapshots included.
func (i *entryIndex) apply(ns *namespaceIndex, results map[carrier]derived) {
	i.mu.Lock()
	defer i.mu.Unlock()
	for c, d := range results {
		byBreaker := map[string][]counting.Entry{}
		for _, e := range d.entries {
			byBreaker[e.Breaker] = append(byBreaker[e.Breaker], e)
		}
		ns.replace(c, byBreaker)
		if d.exists {
			ns.carriers[c] = byBreaker
		} else {
			delete(ns.carriers, c)
		}
		if c.pod != "" {
			delete(ns.gone, c.pod)
			if d.gone != nil {
				ns.gone[c.pod] = d.gone
			}
			continue
		}
		delete(ns.capped, c.node)
		if len(d.capped) > 0 {
			ns.capped[c.node] = d.capped
		}
		if !d.agentUntil.IsZero() {
			ns.deadlines[c.node] = d.agentUntil
		}
	}
}

// replace puts a carrier's new entries in place of its old ones in each breaker they
// name, dropping the snapshot of each breaker that changed.
func (ns *namespaceIndex) replace(c carrier, fresh map[string][]counting.Entry) {
	for name := range ns.carriers[c] {
		if _, ok := fresh[name]; ok {
			continue
		}
		if b := ns.breakers[name]; b != nil {
			b.drop(c)
			if len(b.entries) == 0 {
				delete(ns.breakers, name)
			}
		}
	}
	for name, entries := range fresh {
		b := ns.breakers[name]
		if b == nil {
			b = &breakerEntries{entries: map[carrier][]counting.Entry{}}
			ns.breakers[name] = b
		}
		if prev, ok := b.entries[c]; ok && sameEntries.DeepEqual(prev, entries) {
			continue
		}
		b.set(c, entries)
	}
}

// sameEntries compares entries: their times by the instant they name.
var sameEntries = conversion.EqualitiesOrDie(func(a, b time.Time) bool { return a.Equal(b) })

// namespaceReports is what a reconcile of a namespace reads: each breaker's entries, the
// reports of pods that are gone, and what the cache bounded of each node's report.
type namespaceReports struct {
	byBreaker map[string][]counting.Entry
	// snapshots are the index's snapshots of byBreaker's entries, which remember their
	// aggregate (view); a breaker without one is aggregated afresh.
	snapshots map[string]*entrySnapshot
	// oddShape names, by breaker, the carriers whose entries have the shape (breaker Group
	// or plain) the others' do not have: left out of byBreaker.
	oddShape map[string][]string
	// gone are the reports whose pod no longer exists (or is another pod of the same
	// name): the garbage collector deletes them in a real cluster, in its own time.
	gone []resiliencev1alpha1.BreakerReport
	// capped says, by node, what its report claimed beyond what the cache has bound to it.
	capped map[string][]string
}

// view is what the entries of cb add up to.
func (n namespaceReports) view(cb *resiliencev1alpha1.CircuitBreaker) counting.View {
	if s := n.snapshots[cb.Name]; s != nil {
		return s.view(cb)
	}
	v := counting.Aggregate(cb, n.byBreaker[cb.Name])
	v.OddShape = n.oddShape[cb.Name]
	return v
}

// read returns what a reconcile of the namespace reads for the named breakers, and when
// the next agent's grace ends (zero: none).
func (i *entryIndex) read(ns *namespaceIndex, breakers []string) (namespaceReports, time.Time) {
	i.mu.Lock()
	defer i.mu.Unlock()
	out := namespaceReports{byBreaker: map[string][]counting.Entry{}, snapshots: map[string]*entrySnapshot{}}
	for _, name := range breakers {
		b := ns.breakers[name]
		if b == nil {
			continue
		}
		if b.snap == nil {
			b.snap = b.snapshot()
		}
		out.byBreaker[name] = b.snap.entries
		out.snapshots[name] = b.snap
		if len(b.snap.oddShape) > 0 {
			if out.oddShape == nil {
				out.oddShape = map[string][]string{}
			}
			out.oddShape[name] = b.snap.oddShape
		}
	}
	for _, rep := range ns.gone {
		out.gone = append(out.gone, *rep)
	}
	slices.SortFunc(out.gone, func(a, b resiliencev1alpha1.BreakerReport) int { return strings.Compare(a.Name, b.Name) })
	for node, capped := range ns.capped {
		if out.capped == nil {
			out.capped = map[string][]string{}
		}
		out.capped[node] = capped
	}
	var next time.Time
	for _, end := range ns.deadlines {
		if next.IsZero() || end.Before(next) {
			next = end
		}
	}
	return out, next
}

// snapshot makes the snapshot of the breaker's entries, the odd shape left out
// (counting.OddShapes). They are in carrier order, which the aggregate does not depend on
// (its orders are total, its sums commute) but a test may read.
func (b *breakerEntries) snapshot() *entrySnapshot {
	n := 0
	for _, es := range b.entries {
		n += len(es)
	}
	// Sized once: a snapshot of 1,000 node reports is some 380 KB, and growing it by
	// appending copied it twice over (at 100,000 pods, half of what the operator allocated).
	all := make([]counting.Entry, 0, n)
	for _, c := range b.order {
		all = append(all, b.entries[c]...)
	}
	kept, odd := counting.OddShapes(all)
	return &entrySnapshot{entries: kept, oddShape: odd}
}
