package v1alpha1

// The labels a pod's revision is read from (docs/design.md §10), in the order they are
// tried: a Deployment's ReplicaSets stamp their pods with pod-template-hash, an Argo
// Rollouts Rollout's with rollouts-pod-template-hash (its ReplicaSets carry no
// pod-template-hash), and a StatefulSet or a DaemonSet with controller-revision-hash. The
// operator reads them from the Pod, never from what its report says.
const (
	LabelPodTemplateHash         = "pod-template-hash"
	LabelRolloutsPodTemplateHash = "rollouts-pod-template-hash"
	LabelControllerRevisionHash  = "controller-revision-hash"
)

// RevisionLabels lists the labels a pod's revision is read from, first found first.
var RevisionLabels = []string{LabelPodTemplateHash, LabelRolloutsPodTemplateHash, LabelControllerRevisionHash}

// RevisionOf is the revision of a pod with these labels: the first of RevisionLabels it
// carries with a value, or "" when it carries none.
func RevisionOf(labels map[string]string) string {
	for _, l := range RevisionLabels {
		if v := labels[l]; v != "" {
			return v
		}
	}
	return ""
}

// MaxRevisionsListed is how many revisions status.revisions lists.
const MaxRevisionsListed = 10

// RevisionStatus is what the reporting pods of one revision of a workload add up to, by
// the rules the whole fleet is judged by (docs/design.md §10): a rollout gate compares a
// new revision's line with its baseline's.
type RevisionStatus struct {
	// revision is the pods' pod-template-hash, rollouts-pod-template-hash or
	// controller-revision-hash label, as the operator read it from each Pod.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Revision string `json:"revision"`

	// pods is how many running pods of the revision report this breaker.
	// +kubebuilder:validation:Minimum=0
	Pods int32 `json:"pods"`

	// state is the revision's verdict, decided from its own pods as a fleet's is:
	// Open once pods holding an Open they earned (by their calls, a trip or a
	// failed probe) reach fleetQuorumPercent of the revision's pods (at least one),
	// until an earned Closed; else HalfOpen while some pod is not closed; else
	// Closed. An Open a pod adopted from the fleet, or was forced into, is not the
	// revision's own.
	// +required
	State State `json:"state"`

	// open is how many of the revision's pods hold an Open they earned.
	// +kubebuilder:validation:Minimum=0
	Open int32 `json:"open"`

	// calls is how many calls the revision's pods made over their windows, for a
	// breaker whose pods report their traffic (retryBudget or throttle): each
	// pod's window counts at most a bounded multiple of the revision's median
	// one. Unset when the pods report no traffic: a closed pod's report says
	// nothing of how many calls it made.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Calls *int64 `json:"calls,omitempty"`

	// failureRatePercent is the failure rate of the revision's calls, in percent:
	// of the calls in calls that ran (not throttled), those that did not succeed;
	// for pods that report no traffic, the median of the rates the pods' windows
	// held at their last transitions. Unset when there is nothing to divide.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	FailureRatePercent *int32 `json:"failureRatePercent,omitempty"`
}
