package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/counting"
)

// The counting rules: which reports count, for which pods (docs/design.md §9). A pod's
// breakers reach the operator in its own BreakerReport, written under the pod's token, or
// in its node's NodeBreakerReport, written under the node agent's, as counts. The
// admission policies make sure that each object is its writer's own; what they cannot
// look up (which pods run on a node) is judged here, against the operator's pod cache
// alone: nothing a node report says makes the operator read the API server.
//
//   - A node's entry counts while the node's agent counts (agentCounted), for at most as
//     many pods as the cache has running on that node, of that namespace and revision, and
//     wired to the agent (counting.FromNode scales the rest down); its notable pods only
//     if the cache has them bound there. A node can thus speak only for its own pods.
//   - A pod wired to its node's agent counts through its node's report alone: its own
//     BreakerReport, if it has one, counts for nothing, so a pod reported both ways
//     counts once.
//   - Otherwise a pod's own report counts while it is the pod's (ownedBy) and the pod has
//     not ended; a report whose pod is gone is to be deleted.

// deriver derives the carriers of one namespace again, for one refresh of the index.
type deriver struct {
	r         *CircuitBreakerReconciler
	namespace string
	now       time.Time
	// agents are the agent pods of each node this refresh looked up.
	agents map[string][]*corev1.Pod
}

// derivedPod is what counts of one pod's own report.
type derivedPod struct {
	entries []counting.Entry
	// gone: the report is of a pod that no longer exists (or is another pod of the name),
	// and is to be deleted.
	gone *resiliencev1alpha1.BreakerReport
}

// derivePod reads the pod's own report and the pod from the cache and applies the rules
// above; nil when no report of that name exists.
func (d *deriver) derivePod(ctx context.Context, name string) (*derivedPod, error) {
	var rep resiliencev1alpha1.BreakerReport
	// Read-only use: no copy of the cache's objects.
	err := d.r.Get(ctx, types.NamespacedName{Namespace: d.namespace, Name: name}, &rep, client.UnsafeDisableDeepCopy)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("get BreakerReport %s/%s: %w", d.namespace, name, err)
	}
	pod, err := d.ownPod(ctx, &rep)
	if err != nil {
		return nil, err
	}
	switch {
	case pod == nil || !ownedBy(&rep, pod.UID):
		// What the delete needs (its preconditions) and the Event names.
		return &derivedPod{gone: &resiliencev1alpha1.BreakerReport{
			ObjectMeta: metav1.ObjectMeta{Namespace: rep.Namespace, Name: rep.Name, UID: rep.UID, ResourceVersion: rep.ResourceVersion},
			Breakers:   rep.Breakers,
		}}, nil
	case podEnded(pod) || wiredToAgent(pod):
		return &derivedPod{}, nil
	}
	seen := d.r.seen.firstSeen(&rep, d.now)
	revision := resiliencev1alpha1.RevisionOf(pod.Labels)
	out := &derivedPod{entries: make([]counting.Entry, len(rep.Breakers))}
	for i := range rep.Breakers {
		e := &rep.Breakers[i]
		out.entries[i] = counting.FromPod(name, e, counting.Attested(e.Since.Time, seen[i]), revision)
	}
	return out, nil
}

// ownPod returns the pod a report of its own names, nil when there is none. The cache's
// answer is confirmed around the cache when it disagrees with the report: a new pod can
// report before the cache has seen it, and a pod re-created under its name (a
// StatefulSet's) before the cache has seen the old one go; its report, taken for the old
// pod's, would be deleted. A BreakerReport is written only under its pod's own bound token
// (the admission policy), so these reads grow with the pods that write, not with what a
// report claims.
func (d *deriver) ownPod(ctx context.Context, rep *resiliencev1alpha1.BreakerReport) (*corev1.Pod, error) {
	var cached corev1.Pod
	err := d.r.Get(ctx, types.NamespacedName{Namespace: d.namespace, Name: rep.Name}, &cached, client.UnsafeDisableDeepCopy)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, fmt.Errorf("get Pod %s/%s: %w", d.namespace, rep.Name, err)
	default:
		if ownedBy(rep, cached.UID) {
			return &cached, nil
		}
	}
	return d.r.livePod(ctx, d.namespace, rep.Name)
}

// derivedNode is what counts of one node's report.
type derivedNode struct {
	entries []counting.Entry
	// capped says, per entry the cache bounded, what it claimed and what counts.
	capped []string
	// agentUntil is when the node's agent's grace ends, if it is in one.
	agentUntil time.Time
}

// deriveNode reads the node's report and applies the rules above, from the cache alone;
// nil when the node has no report in the namespace.
func (d *deriver) deriveNode(ctx context.Context, node string) (*derivedNode, error) {
	var rep resiliencev1alpha1.NodeBreakerReport
	err := d.r.Get(ctx, types.NamespacedName{Namespace: d.namespace, Name: node}, &rep, client.UnsafeDisableDeepCopy)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("get NodeBreakerReport %s/%s: %w", d.namespace, node, err)
	}
	out := &derivedNode{}
	counts, until, err := d.agentCounts(ctx, node)
	if err != nil {
		return nil, err
	}
	out.agentUntil = until
	if !counts || rep.NodeName != node {
		return out, nil
	}
	running := map[string]int64{}
	seen := make(map[[2]string]bool, len(rep.Breakers))
	for i := range rep.Breakers {
		e := &rep.Breakers[i]
		// The list is atomic: the API server keeps no pair unique, so a node that repeats
		// one must not count its pods twice. The agent never does.
		pair := [2]string{e.Name, e.Revision}
		if seen[pair] {
			continue
		}
		seen[pair] = true
		n, ok := running[e.Revision]
		if !ok {
			if n, err = d.runningOn(node, e.Revision); err != nil {
				return nil, err
			}
			running[e.Revision] = n
		}
		entry, capped := counting.FromNode(node, e, d.r.seen.firstSeenNode(d.namespace, node, e, d.now), n,
			func(name string, uid types.UID) bool { return d.boundTo(ctx, node, name, uid) })
		if capped {
			out.capped = append(out.capped, cappedNote(e, entry))
		}
		out.entries = append(out.entries, entry)
	}
	return out, nil
}

// cappedNote says what the cache bounded of a node's entry e, counted as entry: the pods it
// claimed and those counted, and the notable pods not bound to the node, by name.
func cappedNote(e *resiliencev1alpha1.NodeBreakerEntry, entry counting.Entry) string {
	note := fmt.Sprintf("%s at revision %q: %d pods claimed, %d counted", counting.Text(e.Name, counting.MaxNameText),
		counting.Text(e.Revision, counting.MaxNameText), e.Pods, entry.Pods)
	var dropped []string
	for _, p := range e.Notable {
		if !slices.ContainsFunc(entry.Notable, func(m counting.Member) bool { return m.UID == p.UID }) {
			dropped = append(dropped, counting.Text(p.Name, counting.MaxNameText))
		}
	}
	if len(dropped) > 0 {
		note += ", notable pods not bound here: " + strings.Join(dropped, ", ")
	}
	return note
}

// agentPodsIndex indexes the pods of the operator's cache by where a node's report may
// count them: "namespace/node/revision" for a pod bound to a node, not ended, and wired to
// its node's agent.
const agentPodsIndex = "fusebox.dev/agent-pods"

func agentPodsKey(namespace, node, revision string) string {
	return namespace + "/" + node + "/" + revision
}

// agentPodsOf is agentPodsIndex's function.
func agentPodsOf(obj client.Object) []string {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Spec.NodeName == "" || podEnded(pod) || !wiredToAgent(pod) {
		return nil
	}
	return []string{agentPodsKey(pod.Namespace, pod.Spec.NodeName, resiliencev1alpha1.RevisionOf(pod.Labels))}
}

// runningOn is how many pods of the namespace and revision the cache has running on node,
// wired to its agent.
func (d *deriver) runningOn(node, revision string) (int64, error) {
	if d.r.agentPods == nil {
		return 0, errors.New("the reconciler counts a node's pods only once SetupWithManager has indexed the pod cache")
	}
	n, err := d.r.agentPods.count(agentPodsKey(d.namespace, node, revision))
	if err != nil {
		return 0, fmt.Errorf("count the pods of node %s: %w", node, err)
	}
	return int64(n), nil
}

// indexCounter counts the objects of an informer's cache under one key of an index of
// its own. A List of the cache would copy every pod it returns into the list to be
// counted: at 100,000 pods on 1,000 nodes, a quarter of all the operator allocated.
type indexCounter struct {
	indexer toolscache.Indexer
	name    string
}

// newIndexCounter adds the index name, of keys, to inf, and counts by it.
func newIndexCounter(inf cache.Informer, name string, keys func(client.Object) []string) (*indexCounter, error) {
	indexed, ok := inf.(interface{ GetIndexer() toolscache.Indexer })
	if !ok {
		return nil, fmt.Errorf("the informer (%T) has no index to count by", inf)
	}
	if err := inf.AddIndexers(toolscache.Indexers{name: func(obj any) ([]string, error) {
		o, ok := obj.(client.Object)
		if !ok {
			return nil, nil
		}
		return keys(o), nil
	}}); err != nil {
		return nil, err
	}
	return &indexCounter{indexer: indexed.GetIndexer(), name: name}, nil
}

// count is how many objects the index has under key.
func (c *indexCounter) count(key string) (int, error) {
	objs, err := c.indexer.ByIndex(c.name, key)
	return len(objs), err
}

// boundTo reports whether the cache has the pod of that name and UID running on node.
func (d *deriver) boundTo(ctx context.Context, node, name string, uid types.UID) bool {
	var pod corev1.Pod
	if err := d.r.Get(ctx, types.NamespacedName{Namespace: d.namespace, Name: name}, &pod, client.UnsafeDisableDeepCopy); err != nil {
		return false
	}
	return pod.UID == uid && pod.Spec.NodeName == node && !podEnded(&pod)
}

// agentCounts says whether node's reports count now (agentCounted), from the node's agent
// pods in the operator's namespace, found by their node in the pod cache's index.
func (d *deriver) agentCounts(ctx context.Context, node string) (bool, time.Time, error) {
	agents, ok := d.agents[node]
	if !ok {
		var pods corev1.PodList
		if err := d.r.List(ctx, &pods, client.InNamespace(d.r.operatorNamespace()), client.MatchingFields{agentNodeIndex: node},
			client.UnsafeDisableDeepCopy); err != nil {
			return false, time.Time{}, fmt.Errorf("list the node agents' pods of node %s: %w", node, err)
		}
		for i := range pods.Items {
			agents = append(agents, &pods.Items[i])
		}
		if d.agents == nil {
			d.agents = map[string][]*corev1.Pod{}
		}
		d.agents[node] = agents
	}
	missing := d.r.index.missingSince(node, len(agents) > 0, d.now)
	counts, until := agentCounted(agents, missing, d.now, d.r.nodeAgentGrace())
	return counts, until, nil
}

// agentNodeIndex indexes the node agents' pods (nodeAgentLabels) by their node, so that a
// node's are found without listing every node's.
const agentNodeIndex = "fusebox.dev/agent-node"

// agentNodeOf is agentNodeIndex's function: the node of a pod with the node agents'
// labels (in any namespace: the lookup names the operator's).
func agentNodeOf(obj client.Object) []string {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Spec.NodeName == "" || !hasNodeAgentLabels(pod) {
		return nil
	}
	return []string{pod.Spec.NodeName}
}

// podEnded: a pod in phase Succeeded or Failed runs no more, and its reports count for
// nothing.
func podEnded(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// ownedBy reports whether the report belongs to the pod of that UID. A report that names
// no Pod owner is taken as its namesake's: the admission policy already made sure a pod
// wrote only its own.
func ownedBy(rep *resiliencev1alpha1.BreakerReport, uid types.UID) bool {
	for _, o := range rep.OwnerReferences {
		if o.Kind == "Pod" && o.APIVersion == "v1" {
			return o.UID == uid
		}
	}
	return true
}

// agentCounted says whether the reports of a node count at now, given the node's agent
// pods (agents) and, when it has none, since when the operator has known it to have none
// (missingSince). They count while an agent is Ready, and for grace after the node last
// had one: an agent that stops being Ready (restarted, rolled, its node failing) writes no
// more, and what its report last said would otherwise hold its pods' states for ever.
// until is when the answer changes with no event to announce it (zero when only an event
// can change it).
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
		// Not Ready since its Ready condition last moved, or, with none yet, since it was
		// created.
		notReady := p.CreationTimestamp.Time
		if ready != nil && !ready.LastTransitionTime.IsZero() {
			notReady = ready.LastTransitionTime.Time
		}
		if notReady.After(since) {
			since = notReady
		}
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
