package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Bounds of a NodeBreakerReport. A node runs at most a few hundred pods (the kubelet's
// maxPods is 110 by default), and a pod that reports through its node's agent at most
// MaxNodePodBreakers breakers, so that one object stays far below etcd's object size
// limit and every CEL rule on an entry stays inside the API server's cost budget when
// multiplied by every entry the object can hold.
const (
	MaxNodeReportPods  = 256
	MaxNodePodBreakers = 100
)

// NodePodReport is what one pod of the node says of its breakers, as its node's agent
// carries it: the pod's name and UID, which the agent took from the pod's own token,
// and the entries the pod sent.
type NodePodReport struct {
	// name is the pod's name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// uid is the pod's UID, from its token. The operator counts the entries only while
	// a pod of this UID is bound to the report's node.
	// +required
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	UID types.UID `json:"uid"`

	// breakers holds one entry per breaker the pod runs, as a BreakerReport's breakers,
	// each name at most once (the operator counts the first entry of a name).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100
	Breakers []BreakerReportEntry `json:"breakers,omitempty"`
}

// NodeBreakerReport is one node's report of the breakers of its pods in one namespace.
// The node agent (fuseboxd --node) writes one per namespace it has reporting pods in,
// named after its node and owned by its Node, so that report writes and watches grow
// with nodes, not pods (docs/design.md §9). An admission policy lets only the agent of
// that node write it; the operator counts a pod's entries only while that pod is bound
// to the node.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=nbrep,categories=fusebox
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.nodeName`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name == self.nodeName",message="metadata.name must be the nodeName: a node has one report per namespace, named after it"
type NodeBreakerReport struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// nodeName is the node whose agent writes this report, the report's name too. It
	// cannot change.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="nodeName is immutable"
	NodeName string `json:"nodeName"`

	// pods holds one line per pod of the node that reports in this namespace, each UID at
	// most once (the operator counts the first line of a UID). The agent writes the whole
	// list every time, so it is atomic: the API server then tracks and correlates it as
	// one value rather than item by item, which made a write of a 100-pod report cost
	// it about a third of what it did (docs/design.md §9).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	Pods []NodePodReport `json:"pods,omitempty"`
}

// NodeBreakerReportList is a list of NodeBreakerReports.
//
// +kubebuilder:object:root=true
type NodeBreakerReportList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeBreakerReport `json:"items"`
}
