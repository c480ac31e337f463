package controller

import (
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// memberIndex holds, per namespace and per breaker, the members that count: what the pods'
// reports add up to, kept between reconciles so that a reconcile reads the members it needs
// without listing every report, and recomputes only the breakers whose members changed.
//
// It is level-based. The watch events of BreakerReports, NodeBreakerReports and Pods only
// mark pod names dirty (cheap, in any order, any number of times); a reconcile then derives
// each dirty pod again from the cache as it stands (derivePod) and applies the result here.
// What an event marks is thus never lost to events delivered out of order between the two
// controllers' handlers, and what the cache holds is always what counts.
//
// Safe for concurrent use.
type memberIndex struct {
	mu         sync.Mutex
	namespaces map[string]*namespaceIndex // guarded by mu
	// agentMissing is since when each node has been known to have no agent pod at all
	// (agentCounted's missingSince); guarded by mu.
	agentMissing map[string]time.Time
}

// namespaceIndex is the index of one namespace.
type namespaceIndex struct {
	// refresh serializes the namespace's refreshes: a reconcile that finds nothing dirty
	// must wait for the one deriving what an event marked, or it reads the members from
	// before the event and no later event comes to correct it.
	refresh sync.Mutex

	// The rest is guarded by memberIndex.mu.

	// synced: the namespace's reports were all marked once, from a list of the cache
	// (a reconciler started without watches, or before their first events, misses none).
	synced bool
	dirty  map[string]bool // pod names to derive again
	// hints names, by pod name, the nodes whose report may carry a line of that pod:
	// where derivePod looks. An event adds them; a derivation that finds no line there
	// removes them.
	hints    map[string]map[string]bool
	pods     map[string]*podState                         // what counts of each pod, by name
	breakers map[string]*breakerMembers                   // by breaker name
	byNode   map[string]map[string]bool                   // node → the pods whose own node's report carries them
	gone     map[string]*resiliencev1alpha1.BreakerReport // by pod name: reports to delete
	misbound map[string][]string                          // by pod name: nodes that claim it wrongly
	// deadlines is when each node's agent's grace ends (agentCounted's until): the pods
	// of that node are derived again then.
	deadlines map[string]time.Time
}

// podState is what counts of one pod, as last derived.
type podState struct {
	members  []member // one per breaker the counted carrier reports
	node     string
	gone     *resiliencev1alpha1.BreakerReport
	misbound []string
}

// breakerMembers is one breaker's members, by pod name, and the snapshot a reconcile reads.
type breakerMembers struct {
	members map[string]member
	snap    *memberSnapshot // nil once the members changed
}

// memberSnapshot is a breaker's members at one moment, shared by the reconciles that read
// them: never changed once made.
type memberSnapshot struct {
	members  []member // without the pods of the odd shape
	oddShape []string

	mu   sync.Mutex
	memo *breakerView // guarded by mu: the aggregate for memoFor
	// memoFor is the breaker the memo is for, by UID and generation: all of the
	// CircuitBreaker that aggregate reads.
	memoFor struct {
		uid        types.UID
		generation int64
	}
}

// view returns aggregate's answer for cb over the snapshot, computed once per snapshot and
// generation of cb.
func (s *memberSnapshot) view(cb *resiliencev1alpha1.CircuitBreaker) breakerView {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.memo == nil || s.memoFor.uid != cb.UID || s.memoFor.generation != cb.Generation {
		v := aggregate(cb, s.members)
		v.oddShape = s.oddShape
		s.memo = &v
		s.memoFor.uid, s.memoFor.generation = cb.UID, cb.Generation
	}
	return *s.memo
}

// namespace returns the namespace's index, made when missing. i.mu must be held.
func (i *memberIndex) namespace(name string) *namespaceIndex {
	if i.namespaces == nil {
		i.namespaces = map[string]*namespaceIndex{}
	}
	ns := i.namespaces[name]
	if ns == nil {
		ns = &namespaceIndex{
			dirty: map[string]bool{}, hints: map[string]map[string]bool{}, pods: map[string]*podState{},
			breakers: map[string]*breakerMembers{}, byNode: map[string]map[string]bool{},
			gone: map[string]*resiliencev1alpha1.BreakerReport{}, misbound: map[string][]string{},
			deadlines: map[string]time.Time{},
		}
		i.namespaces[name] = ns
	}
	return ns
}

// namespaceFor returns the namespace's index, made when missing.
func (i *memberIndex) namespaceFor(name string) *namespaceIndex {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.namespace(name)
}

// markReport marks the pod of a BreakerReport's name dirty.
func (i *memberIndex) markReport(namespace, pod string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.namespace(namespace).dirty[pod] = true
}

// markNodeReport marks dirty the pods whose line differs between old and rep, two versions
// of one node report (either nil: created or deleted), and notes where their lines are.
func (i *memberIndex) markNodeReport(old, rep *resiliencev1alpha1.NodeBreakerReport) {
	changed := changedLines(old, rep)
	if len(changed) == 0 {
		return
	}
	some := rep
	if some == nil {
		some = old
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	ns := i.namespace(some.Namespace)
	for _, pod := range changed {
		ns.dirty[pod] = true
		ns.hint(pod, some.NodeName)
	}
}

// hint notes that node's report may carry a line of pod. memberIndex.mu must be held.
func (ns *namespaceIndex) hint(pod, node string) {
	nodes := ns.hints[pod]
	if nodes == nil {
		nodes = map[string]bool{}
		ns.hints[pod] = nodes
	}
	nodes[node] = true
}

// changedLines names the pods whose line differs between two versions of a node report.
func changedLines(old, rep *resiliencev1alpha1.NodeBreakerReport) []string {
	lines := func(r *resiliencev1alpha1.NodeBreakerReport) map[string][]*resiliencev1alpha1.NodePodReport {
		out := map[string][]*resiliencev1alpha1.NodePodReport{}
		if r != nil {
			for k := range r.Pods {
				out[r.Pods[k].Name] = append(out[r.Pods[k].Name], &r.Pods[k])
			}
		}
		return out
	}
	before, after := lines(old), lines(rep)
	var changed []string
	for pod, a := range after {
		if !equality.Semantic.DeepEqual(a, before[pod]) {
			changed = append(changed, pod)
		}
	}
	for pod := range before {
		if _, ok := after[pod]; !ok {
			changed = append(changed, pod)
		}
	}
	return changed
}

// markPod marks the pod of that name dirty if the index holds anything of it, and says
// whether it did: a pod nothing reports for changes nothing.
func (i *memberIndex) markPod(namespace, pod string) bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	ns := i.namespaces[namespace]
	if ns == nil {
		return false
	}
	_, derived := ns.pods[pod]
	_, hinted := ns.hints[pod]
	if !derived && !hinted && !ns.dirty[pod] {
		return false
	}
	ns.dirty[pod] = true
	return true
}

// markAgent marks dirty every pod that node's report counts, in every namespace, after a
// change of the node's agent pods; gone says the node was seen to lose one. It returns
// the namespaces marked.
func (i *memberIndex) markAgent(node string, gone bool, now time.Time) []string {
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
		pods := ns.byNode[node]
		for pod := range pods {
			ns.dirty[pod] = true
		}
		if len(pods) > 0 {
			marked = append(marked, name)
		}
	}
	slices.Sort(marked)
	return marked
}

// missingSince returns since when node has been known to have no agent pod, recording now
// when it was not known yet; a node found with an agent is forgotten.
func (i *memberIndex) missingSince(node string, hasAgent bool, now time.Time) time.Time {
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

// takeDirty returns the pods to derive again, and the nodes that hint at lines of each,
// and clears them: the pods of nodes whose agent's grace ended by now are among them.
func (i *memberIndex) takeDirty(ns *namespaceIndex, now time.Time) map[string][]string {
	i.mu.Lock()
	defer i.mu.Unlock()
	for node, end := range ns.deadlines {
		if !now.Before(end) {
			for pod := range ns.byNode[node] {
				ns.dirty[pod] = true
			}
			delete(ns.deadlines, node)
		}
	}
	out := make(map[string][]string, len(ns.dirty))
	for pod := range ns.dirty {
		var nodes []string
		for node := range ns.hints[pod] {
			nodes = append(nodes, node)
		}
		slices.Sort(nodes)
		out[pod] = nodes
	}
	clear(ns.dirty)
	return out
}

// derived is one pod's derivation: what counts of it, and which hinted nodes turned out to
// carry no line of it.
type derived struct {
	state      *podState // nil: nothing speaks for the pod
	noLineOn   []string
	agentUntil time.Time // when its node's agent's grace ends, if it is in one
}

// apply stores the derivations of pods, keeping the breakers whose members did not change
// as they were, snapshots included.
func (i *memberIndex) apply(ns *namespaceIndex, pods map[string]derived) {
	i.mu.Lock()
	defer i.mu.Unlock()
	for name, d := range pods {
		// A pod marked again since its derivation read the cache may have a line there
		// now: the event that wrote it added the hint, which must stay for the next.
		for _, node := range d.noLineOn {
			if !ns.dirty[name] {
				delete(ns.hints[name], node)
			}
		}
		if len(ns.hints[name]) == 0 {
			delete(ns.hints, name)
		}
		old := ns.pods[name]
		if old != nil && old.node != "" {
			delete(ns.byNode[old.node], name)
			if len(ns.byNode[old.node]) == 0 {
				delete(ns.byNode, old.node)
			}
		}
		ns.replaceMembers(name, old, d.state)
		delete(ns.gone, name)
		delete(ns.misbound, name)
		if d.state == nil {
			delete(ns.pods, name)
			continue
		}
		ns.pods[name] = d.state
		if n := d.state.node; n != "" {
			if ns.byNode[n] == nil {
				ns.byNode[n] = map[string]bool{}
			}
			ns.byNode[n][name] = true
			if !d.agentUntil.IsZero() {
				ns.deadlines[n] = d.agentUntil
			}
		}
		if d.state.gone != nil {
			ns.gone[name] = d.state.gone
		}
		if len(d.state.misbound) > 0 {
			ns.misbound[name] = d.state.misbound
		}
	}
}

// replaceMembers puts the pod's new members in place of its old ones in each breaker they
// name, dropping the snapshot of each breaker that changed.
func (ns *namespaceIndex) replaceMembers(pod string, old, fresh *podState) {
	var before, after []member
	if old != nil {
		before = old.members
	}
	if fresh != nil {
		after = fresh.members
	}
	for _, m := range before {
		if slices.ContainsFunc(after, func(n member) bool { return n.entry.Name == m.entry.Name }) {
			continue
		}
		if b := ns.breakers[m.entry.Name]; b != nil {
			delete(b.members, pod)
			b.snap = nil
			if len(b.members) == 0 {
				delete(ns.breakers, m.entry.Name)
			}
		}
	}
	for _, m := range after {
		b := ns.breakers[m.entry.Name]
		if b == nil {
			b = &breakerMembers{members: map[string]member{}}
			ns.breakers[m.entry.Name] = b
		}
		if prev, ok := b.members[pod]; ok && sameMember(prev, m) {
			continue
		}
		b.members[pod] = m
		b.snap = nil
	}
}

// sameMember reports whether two members of one pod say the same.
func sameMember(a, b member) bool {
	return a.since.Equal(b.since) && a.revision == b.revision && equality.Semantic.DeepEqual(a.entry, b.entry)
}

// read returns what a reconcile of the namespace reads: the snapshot of each named breaker
// (made if the members changed), the reports to delete, the pods that nodes claim wrongly
// (by node), and when the next agent's grace ends (zero: none).
func (i *memberIndex) read(ns *namespaceIndex, breakers []string) (namespaceReports, time.Time) {
	i.mu.Lock()
	defer i.mu.Unlock()
	out := namespaceReports{byBreaker: map[string][]member{}, snapshots: map[string]*memberSnapshot{}}
	for _, name := range breakers {
		b := ns.breakers[name]
		if b == nil {
			continue
		}
		if b.snap == nil {
			b.snap = snapshotOf(b.members)
		}
		out.byBreaker[name] = b.snap.members
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
	for pod, nodes := range ns.misbound {
		for _, node := range nodes {
			if out.misbound == nil {
				out.misbound = map[string][]string{}
			}
			out.misbound[node] = append(out.misbound[node], pod)
		}
	}
	for _, pods := range out.misbound {
		slices.Sort(pods)
	}
	var next time.Time
	for _, end := range ns.deadlines {
		if next.IsZero() || end.Before(next) {
			next = end
		}
	}
	return out, next
}

// snapshotOf makes the snapshot of a breaker's members, the odd shape left out
// (oddShapes). They are in no order: what aggregate makes of them does not depend on it
// (its orders are total, its sums commute), and sorting thousands of members on each
// change cost more than aggregating them.
func snapshotOf(members map[string]member) *memberSnapshot {
	all := make([]member, 0, len(members))
	for _, m := range members {
		all = append(all, m)
	}
	kept, odd := oddShapes(all)
	return &memberSnapshot{members: kept, oddShape: odd}
}
