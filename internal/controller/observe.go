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

// observations remembers when the operator first saw each entry of each pod's report:
// the only time about a report that no client can write. A report's managedFields are
// the client's to write (the API server keeps a forged entry), and its entries' since
// is the pod's word; neither is the server's clock.
//
// An entry is the pod's, whatever object carried it: its own BreakerReport, or a line of
// its node's NodeBreakerReport (docs/design.md §9). Each carrier's entries are kept
// apart, so that two carriers that disagree for a while (a pod moving to its node's agent,
// a node claiming another's pod) do not reset each other's; an entry one carrier shows
// that another showed first keeps the earlier first sight.
//
// It lives in memory only: after a restart every entry is first seen at the restart,
// which bounds a pod's claims at least as tightly as before. It holds the entries of the
// carriers that exist, no more: an entry that changes replaces its line, and a carrier
// deleted drops its lines.
type observations struct {
	mu   sync.Mutex
	pods map[types.NamespacedName]podObservation // guarded by mu; by namespace and pod name
}

// ownCarrier is the carrier of a pod's own BreakerReport; a node report's carrier is its
// node's name, which is never empty.
const ownCarrier = ""

// podObservation is what the operator has seen of one pod (by UID: a pod deleted and
// re-created under its name is seen afresh), by carrier, then by breaker name.
type podObservation struct {
	uid      types.UID
	carriers map[string]map[string]entryObservation
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

// reportPodUID is the UID of the pod a BreakerReport speaks for: its Pod owner's, or,
// for a report that names none, the report's own (a report written again is then
// another pod's).
func reportPodUID(rep *resiliencev1alpha1.BreakerReport) types.UID {
	for _, o := range rep.OwnerReferences {
		if o.Kind == "Pod" && o.APIVersion == "v1" {
			return o.UID
		}
	}
	return rep.UID
}

// observe records, at now, the entries of rep the operator had not seen and forgets the
// ones rep no longer holds. The watch calls it as it delivers each change, so that first
// sight is the delivery, not a later reconcile.
func (o *observations) observe(rep *resiliencev1alpha1.BreakerReport, now time.Time) {
	o.observeEntries(types.NamespacedName{Namespace: rep.Namespace, Name: rep.Name}, reportPodUID(rep), ownCarrier, rep.Breakers, now)
}

// observeNode does what observe does for each pod line of a node report, and forgets
// the lines of pods that old (the version before, nil for none) held and rep no longer
// does.
func (o *observations) observeNode(old, rep *resiliencev1alpha1.NodeBreakerReport, now time.Time) {
	if old != nil {
		kept := make(map[types.UID]bool, len(rep.Pods))
		for i := range rep.Pods {
			kept[rep.Pods[i].UID] = true
		}
		for i := range old.Pods {
			if p := &old.Pods[i]; !kept[p.UID] {
				o.forgetCarrier(types.NamespacedName{Namespace: old.Namespace, Name: p.Name}, p.UID, old.NodeName)
			}
		}
	}
	// The first line of a UID and the first entry of a name, as derive counts them.
	lines := make(map[types.UID]bool, len(rep.Pods))
	for i := range rep.Pods {
		p := &rep.Pods[i]
		if lines[p.UID] {
			continue
		}
		lines[p.UID] = true
		o.observeEntries(types.NamespacedName{Namespace: rep.Namespace, Name: p.Name}, p.UID, rep.NodeName, firstOfEachName(p.Breakers), now)
	}
}

func (o *observations) observeEntries(pod types.NamespacedName, uid types.UID, carrier string, entries []resiliencev1alpha1.BreakerReportEntry, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	seen := o.pods[pod]
	if seen.uid != uid {
		seen = podObservation{uid: uid}
	}
	if seen.carriers == nil {
		seen.carriers = map[string]map[string]entryObservation{}
	}
	old := seen.carriers[carrier]
	fresh := make(map[string]entryObservation, len(entries))
	for _, e := range entries {
		first, ok := old[e.Name]
		if !ok || !first.sameAs(e) {
			first = entryObservation{state: e.State, reason: e.Reason, since: e.Since.Time, at: now}
		}
		// The same entry carried by another object first: seen then.
		for c, other := range seen.carriers {
			if prev, ok := other[e.Name]; c != carrier && ok && prev.sameAs(e) && prev.at.Before(first.at) {
				first.at = prev.at
			}
		}
		fresh[e.Name] = first
	}
	seen.carriers[carrier] = fresh
	if o.pods == nil {
		o.pods = map[types.NamespacedName]podObservation{}
	}
	o.pods[pod] = seen
}

// firstSeen returns when each of rep's entries was first seen, in order: now for one the
// watch has not delivered yet (the cache holds it, its event is on its way). It records
// nothing: a reconcile may read an older version of the report than the watch has
// delivered, which must not replace what the watch saw.
func (o *observations) firstSeen(rep *resiliencev1alpha1.BreakerReport, now time.Time) []time.Time {
	return o.firstSeenEntries(types.NamespacedName{Namespace: rep.Namespace, Name: rep.Name}, reportPodUID(rep), ownCarrier, rep.Breakers, now)
}

// firstSeenLine is firstSeen for the line of a pod in the report of node.
func (o *observations) firstSeenLine(namespace, node string, line *resiliencev1alpha1.NodePodReport, now time.Time) []time.Time {
	return o.firstSeenEntries(types.NamespacedName{Namespace: namespace, Name: line.Name}, line.UID, node, line.Breakers, now)
}

func (o *observations) firstSeenEntries(pod types.NamespacedName, uid types.UID, carrier string, entries []resiliencev1alpha1.BreakerReportEntry, now time.Time) []time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	seen := o.pods[pod]
	out := make([]time.Time, len(entries))
	for i, e := range entries {
		out[i] = now
		if first, ok := seen.carriers[carrier][e.Name]; ok && seen.uid == uid && first.sameAs(e) {
			out[i] = first.at
		}
	}
	return out
}

// forget drops what was seen of the pod's own report of that key (the report's key is
// its pod's).
func (o *observations) forget(key types.NamespacedName) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.dropCarrier(key, "", ownCarrier, false)
}

// forgetNode drops what was seen of every pod line of the node report rep.
func (o *observations) forgetNode(rep *resiliencev1alpha1.NodeBreakerReport) {
	for i := range rep.Pods {
		o.forgetCarrier(types.NamespacedName{Namespace: rep.Namespace, Name: rep.Pods[i].Name}, rep.Pods[i].UID, rep.NodeName)
	}
}

func (o *observations) forgetCarrier(pod types.NamespacedName, uid types.UID, carrier string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.dropCarrier(pod, uid, carrier, true)
}

// dropCarrier forgets one carrier's entries of the pod (only of that uid, with
// checkUID), and the pod once no carrier is left. o.mu must be held.
func (o *observations) dropCarrier(pod types.NamespacedName, uid types.UID, carrier string, checkUID bool) {
	seen, ok := o.pods[pod]
	if !ok || (checkUID && seen.uid != uid) {
		return
	}
	delete(seen.carriers, carrier)
	if len(seen.carriers) == 0 {
		delete(o.pods, pod)
	}
}

// len is how many pods are remembered.
func (o *observations) len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.pods)
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
	return podMembers(rep.Name, rep.Breakers, firstSeen)
}

// podMembers returns a pod's entries, whatever carried them, as members, each since
// attested by firstSeen.
func podMembers(pod string, entries []resiliencev1alpha1.BreakerReportEntry, firstSeen []time.Time) []member {
	out := make([]member, 0, len(entries))
	for i, e := range entries {
		out = append(out, member{pod: pod, entry: e, since: attested(e.Since.Time, firstSeen[i])})
	}
	return out
}
