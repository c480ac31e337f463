package controller

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// The counting rules: which of what a pod's reports say counts, and for which pod
// (docs/design.md §9). A pod's entries reach the operator in its own BreakerReport,
// written under the pod's token, or in a line of its node's NodeBreakerReport, written
// under the node agent's. The admission policies make sure that each object is its
// writer's own; what they cannot look up (which pods run on a node) is checked here,
// against the operator's pod cache.

// nodeLine is one line of a node report: what a node's agent says of one pod.
type nodeLine struct {
	node    string
	uid     types.UID
	entries []resiliencev1alpha1.BreakerReportEntry
}

// podReports is everything that speaks for the pod of one name in one namespace: its own
// report (nil for none) and every node report line that names it.
type podReports struct {
	own   *resiliencev1alpha1.BreakerReport
	lines []nodeLine
}

// podCount is what counts of one pod's reports.
type podCount struct {
	// carrier is what the counted entries came from: ownCarrier, or a node's name; only
	// meaningful with entries.
	carrier string
	entries []resiliencev1alpha1.BreakerReportEntry
	// node is the pod's own node when its node's report carries it, whether or not
	// the line counts: a change of that node's agent changes what counts.
	node string
	// gone: the pod's own report is of a pod that no longer exists (or is another
	// pod of the name), and is to be deleted.
	gone bool
	// misbound names the nodes whose report claims the pod while the pod is bound to
	// another node, or to none.
	misbound []string
}

// lineVerdict is what a node report's line of a pod is worth.
type lineVerdict int

const (
	// lineCounts: the pod of that UID runs on the report's node.
	lineCounts lineVerdict = iota
	// lineEnded: the pod of that UID is on the report's node, but finished.
	lineEnded
	// lineStale: no pod of that UID has the name (it was deleted, or re-created under
	// it); the agent drops such a line once it sees the pod go.
	lineStale
	// lineMisbound: the pod of that UID is bound to another node, or to none. No agent
	// can have heard from it: the line counts for nothing, and an Event says so.
	lineMisbound
)

// judgeLine says what a line of node's report about the pod of uid is worth, given pod,
// the pod of the line's name (nil: none).
func judgeLine(node string, uid types.UID, pod *corev1.Pod) lineVerdict {
	switch {
	case pod == nil || pod.UID != uid:
		return lineStale
	case pod.Spec.NodeName != node:
		return lineMisbound
	case podEnded(pod):
		return lineEnded
	}
	return lineCounts
}

// podEnded: a pod in phase Succeeded or Failed runs no more, and its reports count for
// nothing.
func podEnded(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// countPod applies the counting rules to what speaks for the pod of one name, given the
// pod (nil: none of that name) and whether each node's agent counts:
//
//   - A node's line counts only while the pod of its UID is bound to that node and has
//     not ended, and the node's agent counts (agentCounted).
//   - A pod reported both ways counts once: a line of its own node's report wins over
//     its BreakerReport, and leaves the pod counting nothing while that node's agent
//     does not count (the pod's own report is then an old one: a pod that reports
//     through its agent does not switch back by itself).
//   - Otherwise its BreakerReport counts while it is the pod's (ownedBy) and the pod
//     has not ended; a report whose pod is gone is to be deleted.
func countPod(pod *corev1.Pod, r podReports, agentCounts func(node string) bool) podCount {
	var c podCount
	var own *nodeLine
	for i := range r.lines {
		l := &r.lines[i]
		switch judgeLine(l.node, l.uid, pod) {
		case lineMisbound:
			c.misbound = append(c.misbound, l.node)
		case lineCounts, lineEnded:
			own = l
		}
	}
	slices.Sort(c.misbound)
	c.misbound = slices.Compact(c.misbound)
	if own != nil {
		c.node = own.node
		if !podEnded(pod) && agentCounts(own.node) {
			c.carrier, c.entries = own.node, own.entries
		}
		c.gone = r.own != nil && !ownedBy(r.own, pod.UID)
		return c
	}
	if r.own == nil {
		return c
	}
	switch {
	case pod == nil || !ownedBy(r.own, pod.UID):
		c.gone = true
	case !podEnded(pod):
		c.carrier, c.entries = ownCarrier, r.own.Breakers
	}
	return c
}

// agentCounted says whether the reports of a node count at now, given the node's agent
// pods (agents) and, when it has none, since when the operator has known it to have
// none (missingSince). They count while an agent is Ready, and for grace after the
// node last had one: an agent that stops being Ready (restarted, rolled, its node
// failing) writes no more, and what its report last said would otherwise hold its
// pods' states for ever. until is when the answer changes with no event to announce
// it (zero when only an event can change it).
func agentCounted(agents []*corev1.Pod, missingSince, now time.Time, grace time.Duration) (counts bool, until time.Time) {
	since := missingSince
	if len(agents) > 0 {
		since = time.Time{}
	}
	for _, p := range agents {
		ready := podReady(p)
		if ready != nil && ready.Status == corev1.ConditionTrue {
			return true, time.Time{}
		}
		// Not Ready since its Ready condition last moved, or, with none yet, since it
		// was created.
		notReady := p.CreationTimestamp.Time
		if ready != nil && !ready.LastTransitionTime.IsZero() {
			notReady = ready.LastTransitionTime.Time
		}
		since = latest(since, notReady)
	}
	if end := since.Add(grace); now.Before(end) {
		return true, end
	}
	return false, time.Time{}
}

// podReady is the pod's Ready condition, nil when it has none.
func podReady(pod *corev1.Pod) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == corev1.PodReady {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}
