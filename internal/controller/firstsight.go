package controller

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/counting"
)

// firstSight remembers when the operator first saw what each report says of each earned
// state: the only time about a report that no client can write. A report's managedFields
// are the client's to write (the API server keeps a forged entry), and its times are the
// writer's word; neither is the server's clock (docs/design.md §5.12, "Time").
//
// It is kept per carrier: for a pod's own BreakerReport per entry, and for a node's
// NodeBreakerReport per (breaker, revision) entry, its openSince, its closedSince and each
// of its notable pods. It lives in memory only: after a restart everything is first seen
// at the restart, which bounds the claims at least as tightly as before. It holds what the
// reports that exist say, no more: an entry that changes replaces its record, and a report
// deleted drops its records.
//
// The watch records as it delivers each change (observe, observeNode), so that first
// sight is the delivery, not a later reconcile; a reconcile only reads (firstSeen,
// firstSeenNode), since it may read an older version of a report than the watch has
// delivered, which must not replace what the watch saw.
type firstSight struct {
	mu    sync.Mutex
	pods  map[types.NamespacedName]podSight  // guarded by mu; by namespace and pod name
	nodes map[types.NamespacedName]nodeSight // guarded by mu; by namespace and node name
}

// podSight is what the operator has seen of one pod's own report: by UID (a pod deleted and
// re-created under its name is seen afresh), then by breaker name.
type podSight struct {
	uid     types.UID
	entries map[string]sighting
}

// sighting is one claim as first seen: a state, a reason and a since, seen at at. A claim
// with another state, reason or since is another claim, first seen when it appeared.
type sighting struct {
	state  resiliencev1alpha1.State
	reason string
	since  time.Time
	at     time.Time
}

func (s sighting) same(state resiliencev1alpha1.State, reason string, since time.Time) bool {
	return s.state == state && s.reason == reason && s.since.Equal(since)
}

// nodeSight is what the operator has seen of one node's report, by breaker and revision.
type nodeSight map[entryKey]nodeEntrySight

type entryKey struct{ breaker, revision string }

// nodeEntrySight is what the operator has seen of one node entry's earned times and
// notable pods.
type nodeEntrySight struct {
	openSince, closedSince sighting
	notable                map[string]sighting // by pod name
}

// reportPodUID is the UID of the pod a BreakerReport speaks for: its Pod owner's, or, for a
// report that names none, the report's own (a report written again is then another pod's).
func reportPodUID(rep *resiliencev1alpha1.BreakerReport) types.UID {
	for _, o := range rep.OwnerReferences {
		if o.Kind == "Pod" && o.APIVersion == "v1" {
			return o.UID
		}
	}
	return rep.UID
}

// observe records, at now, the entries of rep not seen before and forgets the ones rep no
// longer holds.
func (f *firstSight) observe(rep *resiliencev1alpha1.BreakerReport, now time.Time) {
	key := types.NamespacedName{Namespace: rep.Namespace, Name: rep.Name}
	uid := reportPodUID(rep)
	f.mu.Lock()
	defer f.mu.Unlock()
	old := f.pods[key]
	if old.uid != uid {
		old = podSight{}
	}
	fresh := podSight{uid: uid, entries: make(map[string]sighting, len(rep.Breakers))}
	for _, e := range rep.Breakers {
		fresh.entries[e.Name] = seenAgain(old.entries[e.Name], e.State, e.Reason, e.Since.Time, now)
	}
	if f.pods == nil {
		f.pods = map[types.NamespacedName]podSight{}
	}
	f.pods[key] = fresh
}

// seenAgain is the sighting of a claim seen at now: the old one if it is the same claim.
func seenAgain(old sighting, state resiliencev1alpha1.State, reason string, since, now time.Time) sighting {
	if !old.at.IsZero() && old.same(state, reason, since) {
		return old
	}
	return sighting{state: state, reason: reason, since: since, at: now}
}

// firstSeen returns when each of rep's entries was first seen, in order: now for one the
// watch has not delivered yet (the cache holds it, its event is on its way).
func (f *firstSight) firstSeen(rep *resiliencev1alpha1.BreakerReport, now time.Time) []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	seen := f.pods[types.NamespacedName{Namespace: rep.Namespace, Name: rep.Name}]
	out := make([]time.Time, len(rep.Breakers))
	for i, e := range rep.Breakers {
		out[i] = now
		if s, ok := seen.entries[e.Name]; ok && seen.uid == reportPodUID(rep) && s.same(e.State, e.Reason, e.Since.Time) {
			out[i] = s.at
		}
	}
	return out
}

// forget drops what was seen of the pod's own report of that key.
func (f *firstSight) forget(key types.NamespacedName) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.pods, key)
}

// observeNode records, at now, what rep's entries claim that was not seen before, and
// forgets what rep no longer claims.
func (f *firstSight) observeNode(rep *resiliencev1alpha1.NodeBreakerReport, now time.Time) {
	key := types.NamespacedName{Namespace: rep.Namespace, Name: rep.Name}
	f.mu.Lock()
	defer f.mu.Unlock()
	old := f.nodes[key]
	fresh := make(nodeSight, len(rep.Breakers))
	for i := range rep.Breakers {
		e := &rep.Breakers[i]
		k := entryKey{e.Name, e.Revision}
		prev := old[k]
		s := nodeEntrySight{notable: make(map[string]sighting, len(e.Notable))}
		if e.OpenSince != nil {
			s.openSince = seenAgain(prev.openSince, resiliencev1alpha1.StateOpen, "", e.OpenSince.Time, now)
		}
		if e.ClosedSince != nil {
			s.closedSince = seenAgain(prev.closedSince, resiliencev1alpha1.StateClosed, "", e.ClosedSince.Time, now)
		}
		for _, p := range e.Notable {
			s.notable[p.Name] = seenAgain(prev.notable[p.Name], p.State, p.Reason, p.Since.Time, now)
		}
		fresh[k] = s
	}
	if f.nodes == nil {
		f.nodes = map[types.NamespacedName]nodeSight{}
	}
	f.nodes[key] = fresh
}

// firstSeenNode returns when the operator first saw what entry e of node's report in
// namespace claims: now for what the watch has not delivered yet.
func (f *firstSight) firstSeenNode(namespace, node string, e *resiliencev1alpha1.NodeBreakerEntry, now time.Time) counting.Seen {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.nodes[types.NamespacedName{Namespace: namespace, Name: node}][entryKey{e.Name, e.Revision}]
	at := func(seen sighting, state resiliencev1alpha1.State, reason string, since time.Time) time.Time {
		if !seen.at.IsZero() && seen.same(state, reason, since) {
			return seen.at
		}
		return now
	}
	out := counting.Seen{OpenSince: now, ClosedSince: now, Notable: make([]time.Time, len(e.Notable))}
	if e.OpenSince != nil {
		out.OpenSince = at(s.openSince, resiliencev1alpha1.StateOpen, "", e.OpenSince.Time)
	}
	if e.ClosedSince != nil {
		out.ClosedSince = at(s.closedSince, resiliencev1alpha1.StateClosed, "", e.ClosedSince.Time)
	}
	for i, p := range e.Notable {
		out.Notable[i] = at(s.notable[p.Name], p.State, p.Reason, p.Since.Time)
	}
	return out
}

// forgetNode drops what was seen of the node report of that key.
func (f *firstSight) forgetNode(key types.NamespacedName) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.nodes, key)
}

// len is how many reports are remembered.
func (f *firstSight) len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.pods) + len(f.nodes)
}
