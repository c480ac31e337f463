package controller

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// DefaultOperatorNamespace is where the operator looks for the node agents' pods when
// it is told no namespace (POD_NAMESPACE, --operator-namespace): config/default's.
const DefaultOperatorNamespace = "fusebox-system"

// DefaultNodeAgentGrace is how long a node's reports keep counting after its agent
// stopped being Ready: long enough for the agent's pod to be restarted or rolled, short
// enough that the last word of an agent that is gone does not hold its pods' states.
const DefaultNodeAgentGrace = 30 * time.Second

// nodeAgentLabels select the node agents' pods (the DaemonSet fusebox-node) in the
// operator's namespace.
var nodeAgentLabels = client.MatchingLabels{
	resiliencev1alpha1.LabelAppName:      resiliencev1alpha1.AppName,
	resiliencev1alpha1.LabelAppComponent: resiliencev1alpha1.ComponentNodeAgent,
}

// deriver derives pods of one namespace again, for one refresh of the index.
type deriver struct {
	r         *CircuitBreakerReconciler
	namespace string
	now       time.Time
	// agents are the agent pods by node, listed once per refresh when a line needs
	// them; nil until then.
	agents map[string][]*corev1.Pod
}

// derive reads what speaks for the pod of that name from the cache (its BreakerReport,
// and its lines in the reports of nodes) and applies the counting rules (countPod).
func (d *deriver) derive(ctx context.Context, name string, nodes []string) (derived, error) {
	var out derived
	var reports podReports
	var own resiliencev1alpha1.BreakerReport
	// Read-only use: no copy of the cache's objects.
	err := d.r.Get(ctx, types.NamespacedName{Namespace: d.namespace, Name: name}, &own, client.UnsafeDisableDeepCopy)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return out, fmt.Errorf("get BreakerReport %s/%s: %w", d.namespace, name, err)
	default:
		reports.own = &own
	}
	for _, node := range nodes {
		found, err := d.linesOn(ctx, node, name, &reports)
		if err != nil {
			return out, err
		}
		if !found {
			out.noLineOn = append(out.noLineOn, node)
		}
	}
	if reports.own == nil && len(reports.lines) == 0 {
		return out, nil
	}
	pod, err := d.pod(ctx, name, reports)
	if err != nil {
		return out, err
	}
	counted := map[string]bool{}
	if pod != nil && pod.Spec.NodeName != "" {
		for _, l := range reports.lines {
			if l.node == pod.Spec.NodeName {
				counts, until, err := d.agentCounts(ctx, l.node)
				if err != nil {
					return out, err
				}
				counted[l.node], out.agentUntil = counts, until
				break
			}
		}
	}
	c := countPod(pod, reports, func(node string) bool { return counted[node] })
	state := &podState{node: c.node, misbound: c.misbound}
	if c.gone {
		// What the delete needs (its preconditions) and the Event names.
		state.gone = &resiliencev1alpha1.BreakerReport{
			ObjectMeta: metav1.ObjectMeta{Namespace: own.Namespace, Name: own.Name, UID: own.UID, ResourceVersion: own.ResourceVersion},
			Breakers:   own.Breakers,
		}
	}
	if len(c.entries) > 0 {
		var seen []time.Time
		if c.carrier == ownCarrier {
			seen = d.r.seen.firstSeen(reports.own, d.now)
		} else {
			for _, l := range reports.lines {
				if l.node == c.carrier {
					line := &resiliencev1alpha1.NodePodReport{Name: name, UID: l.uid, Breakers: l.entries}
					seen = d.r.seen.firstSeenLine(d.namespace, l.node, line, d.now)
					break
				}
			}
		}
		state.members = podMembers(name, c.entries, seen)
		// The Pod's word, not the report's (countPod counts entries only of a pod it has).
		if pod != nil {
			rev := resiliencev1alpha1.RevisionOf(pod.Labels)
			for i := range state.members {
				state.members[i].revision = rev
			}
		}
	}
	out.state = state
	return out, nil
}

// linesOn adds to reports the lines of node's report that name the pod, and says whether
// there were any.
func (d *deriver) linesOn(ctx context.Context, node, pod string, reports *podReports) (bool, error) {
	var rep resiliencev1alpha1.NodeBreakerReport
	err := d.r.Get(ctx, types.NamespacedName{Namespace: d.namespace, Name: node}, &rep, client.UnsafeDisableDeepCopy)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("get NodeBreakerReport %s/%s: %w", d.namespace, node, err)
	}
	found := false
	for i := range rep.Pods {
		p := &rep.Pods[i]
		if p.Name != pod || slices.ContainsFunc(rep.Pods[:i], func(q resiliencev1alpha1.NodePodReport) bool { return q.UID == p.UID }) {
			continue
		}
		reports.lines = append(reports.lines, nodeLine{node: rep.NodeName, uid: p.UID, entries: firstOfEachName(p.Breakers)})
		found = true
	}
	return found, nil
}

// firstOfEachName returns entries without the entries whose name an earlier one already
// has: a node report's lists are atomic (docs/design.md §9), so the API server does not
// keep their keys unique, and an agent that repeats a breaker must not make it count
// twice. The agent never does, and entries is then returned as it is.
func firstOfEachName(entries []resiliencev1alpha1.BreakerReportEntry) []resiliencev1alpha1.BreakerReportEntry {
	for i := 1; i < len(entries); i++ {
		if slices.ContainsFunc(entries[:i], func(e resiliencev1alpha1.BreakerReportEntry) bool { return e.Name == entries[i].Name }) {
			out := slices.Clone(entries[:i])
			for _, e := range entries[i+1:] {
				if !slices.ContainsFunc(out, func(o resiliencev1alpha1.BreakerReportEntry) bool { return o.Name == e.Name }) {
					out = append(out, e)
				}
			}
			return out
		}
	}
	return entries
}

// pod returns the pod of that name, nil when there is none. The cache's answer is
// confirmed around the cache when it disagrees with a report: a new pod can report
// before the cache has seen it (or seen it bound to its node), and a pod re-created under
// its name (a StatefulSet's) before the cache has seen the old one go; its report, taken
// for the old pod's, would be deleted, and its writer writes it again only when an entry
// changes.
func (d *deriver) pod(ctx context.Context, name string, reports podReports) (*corev1.Pod, error) {
	var cached corev1.Pod
	err := d.r.Get(ctx, types.NamespacedName{Namespace: d.namespace, Name: name}, &cached, client.UnsafeDisableDeepCopy)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, fmt.Errorf("get Pod %s/%s: %w", d.namespace, name, err)
	default:
		if agrees(&cached, reports) {
			return &cached, nil
		}
	}
	return d.r.livePod(ctx, d.namespace, name)
}

// agrees reports whether the cached pod is the one every report names, bound where every
// node's line says.
func agrees(pod *corev1.Pod, reports podReports) bool {
	if reports.own != nil && !ownedBy(reports.own, pod.UID) {
		return false
	}
	for _, l := range reports.lines {
		if l.uid != pod.UID || l.node != pod.Spec.NodeName {
			return false
		}
	}
	return true
}

// agentCounts says whether node's reports count now (agentCounted), from the agent pods
// in the operator's namespace.
func (d *deriver) agentCounts(ctx context.Context, node string) (bool, time.Time, error) {
	if d.agents == nil {
		var pods corev1.PodList
		if err := d.r.List(ctx, &pods, client.InNamespace(d.r.operatorNamespace()), nodeAgentLabels, client.UnsafeDisableDeepCopy); err != nil {
			return false, time.Time{}, fmt.Errorf("list the node agents' pods: %w", err)
		}
		d.agents = map[string][]*corev1.Pod{}
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.Spec.NodeName != "" {
				d.agents[p.Spec.NodeName] = append(d.agents[p.Spec.NodeName], p)
			}
		}
	}
	agents := d.agents[node]
	missing := d.r.index.missingSince(node, len(agents) > 0, d.now)
	counts, until := agentCounted(agents, missing, d.now, d.r.nodeAgentGrace())
	return counts, until, nil
}

// operatorNamespace is where the node agents run.
func (r *CircuitBreakerReconciler) operatorNamespace() string {
	if r.OperatorNamespace != "" {
		return r.OperatorNamespace
	}
	return DefaultOperatorNamespace
}

func (r *CircuitBreakerReconciler) nodeAgentGrace() time.Duration {
	if r.NodeAgentGrace > 0 {
		return r.NodeAgentGrace
	}
	return DefaultNodeAgentGrace
}

// isNodeAgent reports whether pod is one of the node agents.
func (r *CircuitBreakerReconciler) isNodeAgent(pod *corev1.Pod) bool {
	if pod.Namespace != r.operatorNamespace() {
		return false
	}
	for k, v := range nodeAgentLabels {
		if pod.Labels[k] != v {
			return false
		}
	}
	return true
}
