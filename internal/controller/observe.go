package controller

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// maxClockSkew is how far ahead of the operator's clock a report's times may run: the
// documented skew between a node's clock and the operator's (docs/design.md §5.12).
const maxClockSkew = 2 * time.Second

// observations remembers when the operator first saw each entry of each BreakerReport:
// the only time about a report that no client can write. A report's managedFields are
// the client's to write (the API server keeps a forged entry), and its entries' since
// is the pod's word; neither is the server's clock.
//
// It lives in memory only: after a restart every entry is first seen at the restart,
// which bounds a pod's claims at least as tightly as before. It holds the entries of the
// reports that exist, no more: an entry that changes replaces its line, and a report
// deleted drops its lines.
type observations struct {
	mu      sync.Mutex
	reports map[types.NamespacedName]reportObservation // guarded by mu
}

// reportObservation is what the operator has seen of one report object (by UID: a report
// deleted and written again by a new pod of the same name is seen afresh).
type reportObservation struct {
	uid     types.UID
	entries map[string]entryObservation // by breaker name
}

// entryObservation is one entry as first seen: an entry with another state, reason or
// since is another entry, first seen when it appeared. Counts and config fields that
// change while the state holds do not make it new.
type entryObservation struct {
	state  resiliencev1alpha1.State
	reason string
	since  time.Time
	at     time.Time // when the operator first saw it
}

func (e entryObservation) sameAs(n resiliencev1alpha1.BreakerReportEntry) bool {
	return e.state == n.State && e.reason == n.Reason && e.since.Equal(n.Since.Time)
}

// observe records, at now, the entries of rep the operator had not seen and forgets the
// ones rep no longer holds. The watch calls it as it delivers each change, so that first
// sight is the delivery, not a later reconcile.
func (o *observations) observe(rep *resiliencev1alpha1.BreakerReport, now time.Time) {
	key := types.NamespacedName{Namespace: rep.Namespace, Name: rep.Name}
	o.mu.Lock()
	defer o.mu.Unlock()
	old := o.reports[key]
	if old.uid != rep.UID {
		old = reportObservation{}
	}
	seen := reportObservation{uid: rep.UID, entries: make(map[string]entryObservation, len(rep.Breakers))}
	for _, e := range rep.Breakers {
		first, ok := old.entries[e.Name]
		if !ok || !first.sameAs(e) {
			first = entryObservation{state: e.State, reason: e.Reason, since: e.Since.Time, at: now}
		}
		seen.entries[e.Name] = first
	}
	if o.reports == nil {
		o.reports = map[types.NamespacedName]reportObservation{}
	}
	o.reports[key] = seen
}

// firstSeen returns when each of rep's entries was first seen, in order: now for one the
// watch has not delivered yet (the cache holds it, its event is on its way). It records
// nothing: a reconcile may read an older version of the report than the watch has
// delivered, which must not replace what the watch saw.
func (o *observations) firstSeen(rep *resiliencev1alpha1.BreakerReport, now time.Time) []time.Time {
	key := types.NamespacedName{Namespace: rep.Namespace, Name: rep.Name}
	o.mu.Lock()
	defer o.mu.Unlock()
	seen := o.reports[key]
	out := make([]time.Time, len(rep.Breakers))
	for i, e := range rep.Breakers {
		out[i] = now
		if first, ok := seen.entries[e.Name]; ok && seen.uid == rep.UID && first.sameAs(e) {
			out[i] = first.at
		}
	}
	return out
}

// forget drops what was seen of the report of that key.
func (o *observations) forget(key types.NamespacedName) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.reports, key)
}

// len is how many reports are remembered.
func (o *observations) len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.reports)
}

// attested is the time a member's since counts as: the pod's own, but at most the skew
// after the operator first saw the entry. A pod cannot date a state in the future, past
// the first time it could have been read, and so pin the fleet to it.
func attested(since, firstSeen time.Time) time.Time {
	if limit := firstSeen.Add(maxClockSkew); since.After(limit) {
		return limit
	}
	return since
}

// membersOf returns the report's entries as members, each since attested by firstSeen
// (observe's answer for rep).
func membersOf(rep *resiliencev1alpha1.BreakerReport, firstSeen []time.Time) []member {
	out := make([]member, 0, len(rep.Breakers))
	for i, e := range rep.Breakers {
		out = append(out, member{pod: rep.Name, entry: e, since: attested(e.Since.Time, firstSeen[i])})
	}
	return out
}
