package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// State is a circuit's state, as pods report it and as the fleet sees it.
// +kubebuilder:validation:Enum=Closed;Open;HalfOpen
type State string

const (
	// StateClosed means calls run and are counted.
	StateClosed State = breakerconfig.StateClosed
	// StateOpen means calls are short-circuited until the open timeout passes.
	StateOpen State = breakerconfig.StateOpen
	// StateHalfOpen means a few probe calls test whether the dependency is back.
	StateHalfOpen State = breakerconfig.StateHalfOpen
)

// MemberStatus is one pod's line about this breaker, as the operator read it
// from the pod's BreakerReport.
type MemberStatus struct {
	// pod is the name of the reporting pod.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Pod string `json:"pod"`

	// node is the node whose agent carried the pod's report; empty for a pod that writes
	// its own BreakerReport.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Node string `json:"node,omitempty"`

	// The pod's circuit, as its report said.
	PodCircuit `json:",inline"`

	// reason is how the pod's circuit reached its state: Started, Tripped,
	// Manual, ProbeFailed, ProbesSucceeded, TimedOut, Adopted or Forced.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Reason string `json:"reason,omitempty"`

	// keys summarises the per-key breakers of a breaker Group, for a Group.
	// +optional
	Keys *KeySummary `json:"keys,omitempty"`
}

// MaxGroupKeys bounds each count of the KeySummary a pod reports (a rule of
// BreakerReport's keys, not of the type: the CircuitBreaker's status.keys holds
// the sums, which may go higher). A Group (package registry) keeps 1024
// breakers unless Group.SetMaxKeys says otherwise, and each costs memory,
// so no real pod holds this many; and the operator's sums of open and
// half-open keys over the pods of a fleet stay inside int32 up to 5,000 pods
// at this bound (5,000 × 400,000 = 2·10⁹ < 2³¹−1 ≈ 2.1·10⁹).
const MaxGroupKeys = breakerconfig.MaxKeyCount

// KeySummary is what a breaker Group holds: one breaker per key (a host, a
// route, a tenant) under the CircuitBreaker's policy. A pod reports the Group
// as a whole, not one line per key.
type KeySummary struct {
	// keys is how many per-key breakers the Group holds.
	// +kubebuilder:validation:Minimum=0
	Keys int32 `json:"keys"`

	// open is how many of them are open.
	// +kubebuilder:validation:Minimum=0
	Open int32 `json:"open"`

	// halfOpen is how many of them are probing.
	// +kubebuilder:validation:Minimum=0
	HalfOpen int32 `json:"halfOpen"`

	// worst names at most 5 keys that are not closed, open first.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=5
	// +kubebuilder:validation:items:MaxLength=253
	Worst []string `json:"worst,omitempty"`
}

// MaxMembersListed is how many pods status.members lists.
const MaxMembersListed = 20

// MemberCounts summarizes the reporting pods.
type MemberCounts struct {
	// reporting is how many running pods report this breaker. Pods that
	// finished (phase Succeeded or Failed) count for nothing.
	Reporting int32 `json:"reporting"`
	// closed is how many reporting pods have the circuit closed.
	Closed int32 `json:"closed"`
	// open is how many reporting pods have the circuit open.
	Open int32 `json:"open"`
	// halfOpen is how many reporting pods are probing.
	HalfOpen int32 `json:"halfOpen"`
	// onLatestConfig is how many reporting pods run the configuration of
	// observedGeneration.
	OnLatestConfig int32 `json:"onLatestConfig"`
}

// CircuitBreakerStatus is what the operator and the pods observed of a breaker.
type CircuitBreakerStatus struct {
	// observedGeneration is the metadata.generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// configMapName is the ConfigMap, in this namespace, where the breaker's
	// configuration is published under the key <name>.json.
	// +optional
	ConfigMapName string `json:"configMapName,omitempty"`

	// state is the breaker's state across its pods: the most severe state any
	// pod reports (Open, then HalfOpen, then Closed); with scope Fleet, the
	// fleet's shared verdict. Empty until a pod reports.
	// +optional
	State State `json:"state,omitempty"`

	// memberCounts counts every reporting pod by state.
	// +optional
	MemberCounts *MemberCounts `json:"memberCounts,omitempty"`

	// consecutiveOpens is how many open periods in a row the breaker has had
	// with no close in between: with scope Fleet, the fleet verdict's; with
	// scope Pod, the most any pod reports. 0 when closed.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ConsecutiveOpens int32 `json:"consecutiveOpens,omitempty"`

	// openTimeout is the length of the current open period, backed off by
	// maxOpenTimeout: the fleet verdict's, or with scope Pod the longest any
	// pod reports.
	// +optional
	// +kubebuilder:validation:Type=string
	OpenTimeout *metav1.Duration `json:"openTimeout,omitempty"`

	// keys, for a breaker Group, sums the pods' per-key breakers: keys is the
	// most any pod holds, open and halfOpen are summed over pods, and worst
	// names the keys open in the most pods. Each pod counts for at most four
	// times the median pod's keys (at least 4 × 1,024) and names a key once.
	// +optional
	Keys *KeySummary `json:"keys,omitempty"`

	// traffic sums what the reporting pods' windows hold, with the fleet's
	// retry and throttle ratios; set only for a breaker with retryBudget or
	// throttle, whose pods report their traffic.
	// +optional
	Traffic *FleetTraffic `json:"traffic,omitempty"`

	// concurrency is how spec.concurrency.maxInFlight is divided among the pods and what
	// their windows hold of it; set only for a breaker with spec.concurrency.
	// +optional
	Concurrency *FleetConcurrency `json:"concurrency,omitempty"`

	// candidate is what the pods' shadow judgements of spec.candidate add up to,
	// beside what the enforced policy did over the same span; set while
	// spec.candidate is.
	// +optional
	Candidate *CandidateStatus `json:"candidate,omitempty"`

	// members lists the most relevant reporting pods, at most 20: open first,
	// then half-open, refusing the latest configuration, behind it, and closed.
	// The operator writes it from the pods' BreakerReports; memberCounts
	// counts them all.
	// +optional
	// +listType=map
	// +listMapKey=pod
	// +kubebuilder:validation:MaxItems=20
	Members []MemberStatus `json:"members,omitempty"`

	// revisions adds the reporting pods up per revision of their workload, at most
	// 10, most pods first (docs/design.md §10): what a rollout gate judges.
	// Pods that carry no revision label are left out.
	// +optional
	// +listType=map
	// +listMapKey=revision
	// +kubebuilder:validation:MaxItems=10
	Revisions []RevisionStatus `json:"revisions,omitempty"`

	// conditions are the latest observations of the breaker: Ready (its
	// configuration is valid and published), Open (its state is Open; with
	// scope Fleet, the fleet verdict), ConfigApplied (every reporting pod
	// runs the published configuration) and Overridden (spec.override is in
	// force: the published mode is the override's).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
}
