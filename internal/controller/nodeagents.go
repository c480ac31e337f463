package controller

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// The node agents (docs/design.md §9) as the operator sees them: where their pods run,
// how long a node's report counts once its agent is not Ready, and which application pods
// report through them.

// DefaultOperatorNamespace is where the operator looks for the node agents' pods when it
// is told no namespace (POD_NAMESPACE, --operator-namespace): config/default's.
const DefaultOperatorNamespace = "fusebox-system"

// DefaultNodeAgentGrace is how long a node's reports keep counting after its agent stopped
// being Ready: long enough for the agent's pod to be restarted or rolled, short enough
// that the last word of an agent that is gone does not hold its pods' states.
const DefaultNodeAgentGrace = 30 * time.Second

// nodeAgentLabels select the node agents' pods (the DaemonSet fusebox-node) in the
// operator's namespace.
var nodeAgentLabels = client.MatchingLabels{
	resiliencev1alpha1.LabelAppName:      resiliencev1alpha1.AppName,
	resiliencev1alpha1.LabelAppComponent: resiliencev1alpha1.ComponentNodeAgent,
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
	return pod.Namespace == r.operatorNamespace() && hasNodeAgentLabels(pod)
}

// hasNodeAgentLabels reports whether pod carries the node agents' labels, in any
// namespace.
func hasNodeAgentLabels(pod *corev1.Pod) bool {
	for k, v := range nodeAgentLabels {
		if pod.Labels[k] != v {
			return false
		}
	}
	return true
}

// wiredToAgent reports whether a pod reports through its node's agent: one of its
// containers has the agent's address in FUSEBOX_NODE_AGENT, as the pod webhook wires it
// (pkg/webhook/podinject). Its own BreakerReport, if any, then counts for nothing, and its
// node's report may count it.
func wiredToAgent(pod *corev1.Pod) bool {
	has := func(cs []corev1.Container) bool {
		return slices.ContainsFunc(cs, func(c corev1.Container) bool {
			return slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == breakerconfig.EnvNodeAgent })
		})
	}
	return has(pod.Spec.Containers) || has(pod.Spec.InitContainers)
}
