package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// Mode says whether a breaker enforces its verdict, only reports it, or is held
// in one state by an operator.
// +kubebuilder:validation:Enum=Enforce;MetricsOnly;ForcedOpen;ForcedClosed
type Mode string

const (
	// ModeEnforce short-circuits calls while the circuit is open.
	ModeEnforce Mode = breakerconfig.ModeEnforce
	// ModeMetricsOnly computes and reports the verdict but never refuses a call,
	// for trying a policy out on live traffic.
	ModeMetricsOnly Mode = breakerconfig.ModeMetricsOnly
	// ModeForcedOpen holds the circuit open: every call is short-circuited.
	ModeForcedOpen Mode = breakerconfig.ModeForcedOpen
	// ModeForcedClosed holds the circuit closed: every call runs.
	ModeForcedClosed Mode = breakerconfig.ModeForcedClosed
)

// Scope says whether each pod decides alone or one pod's verdict opens the
// circuit for every pod.
// +kubebuilder:validation:Enum=Pod;Fleet
type Scope string

const (
	// ScopePod lets every pod open and close its own circuit.
	ScopePod Scope = breakerconfig.ScopePod
	// ScopeFleet shares the verdict: pods that open on their own evidence open
	// the circuit for all (see fleetQuorumPercent).
	ScopeFleet Scope = breakerconfig.ScopeFleet
)

// Defaults of CircuitBreakerSpec, as the API server fills them in.
const (
	DefaultOpenTimeout            = "30s"
	DefaultWindow                 = "10s"
	DefaultFailureRatePercent     = 50
	DefaultMinimumThroughput      = 20
	DefaultSuccessThreshold       = 2
	DefaultHalfOpenPermittedCalls = 1
	DefaultFleetQuorumPercent     = 0
)

// CircuitBreakerSpec declares how a breaker judges a dependency.
type CircuitBreakerSpec struct {
	// Each duration's CEL rule checks the bounds only of a string that matches
	// the pattern, so one that is no duration at all is reported once, by the
	// pattern, rather than again as a CEL type-conversion error.

	// openTimeout is how long the circuit stays open before it lets probe calls
	// through (half-open). A Go duration between 1s and 24h, such as "30s" or "2m".
	// +optional
	// +kubebuilder:default="30s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule=`!self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$') || (duration(self) >= duration('1s') && duration(self) <= duration('24h'))`,message="openTimeout must be between 1s and 24h"
	OpenTimeout *metav1.Duration `json:"openTimeout,omitempty"`

	// window is the width of each of the two buckets of the rolling window in
	// which failures are counted. A Go duration between 1s and 1h.
	// +optional
	// +kubebuilder:default="10s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule=`!self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$') || (duration(self) >= duration('1s') && duration(self) <= duration('1h'))`,message="window must be between 1s and 1h"
	Window *metav1.Duration `json:"window,omitempty"`

	// failureRatePercent is the share of failed calls in the window, in percent,
	// at or above which the circuit opens. 1 to 100.
	// +optional
	// +kubebuilder:default=50
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	FailureRatePercent *int32 `json:"failureRatePercent,omitempty"`

	// minimumThroughput is how many calls the window must hold before the
	// failure rate is judged at all, so a quiet circuit does not open on thin
	// evidence. At least 1.
	// +optional
	// +kubebuilder:default=20
	// +kubebuilder:validation:Minimum=1
	MinimumThroughput *int32 `json:"minimumThroughput,omitempty"`

	// successThreshold is how many consecutive successful probes close a
	// half-open circuit. At least 1.
	// +optional
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=1
	SuccessThreshold *int32 `json:"successThreshold,omitempty"`

	// halfOpenPermittedCalls caps how many probe calls run at the same time in
	// each pod while the circuit is half-open; callers over the cap are
	// short-circuited. At least 1.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	HalfOpenPermittedCalls *int32 `json:"halfOpenPermittedCalls,omitempty"`

	// mode is Enforce (short-circuit while open), MetricsOnly (judge and report,
	// never refuse a call), ForcedOpen or ForcedClosed (hold the circuit in that
	// state until the mode changes).
	// +optional
	// +kubebuilder:default=Enforce
	Mode Mode `json:"mode,omitempty"`

	// scope is Pod (each pod decides alone) or Fleet (pods that open on their
	// own evidence open the circuit for every pod; counters stay per pod).
	// +optional
	// +kubebuilder:default=Pod
	Scope Scope `json:"scope,omitempty"`

	// fleetQuorumPercent, with scope Fleet, is the share of the reporting pods,
	// in percent, that must hold an Open reached on their own evidence (their
	// calls, a Trip, a failed probe) before the fleet opens; at least one pod
	// always must. 0 (the default) means one pod is enough. A quorum keeps one
	// pod on a bad node from opening the circuit for the whole Deployment.
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	FleetQuorumPercent *int32 `json:"fleetQuorumPercent,omitempty"`
}

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

	// state is the pod's circuit state.
	// +required
	State State `json:"state"`

	// since is when the pod's circuit reached its state.
	// +required
	Since metav1.Time `json:"since"`

	// reason is how the pod's circuit reached its state: Started, Tripped,
	// Manual, ProbeFailed, ProbesSucceeded, TimedOut, Adopted or Forced.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Reason string `json:"reason,omitempty"`

	// failureRatePercent is the failure rate of the pod's window, in percent,
	// at the transition into state.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	FailureRatePercent *int32 `json:"failureRatePercent,omitempty"`

	// calls is how many calls the pod's window held at the transition.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Calls *int64 `json:"calls,omitempty"`

	// configGeneration is the generation of the configuration the pod runs.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ConfigGeneration int64 `json:"configGeneration,omitempty"`

	// configError says why the pod refused the latest published configuration;
	// it keeps running its last good one. Empty when it runs the latest.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	ConfigError string `json:"configError,omitempty"`
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

	// members lists the most relevant reporting pods, at most 20: open first,
	// then half-open, refusing the latest configuration, behind it, and closed.
	// The operator writes it from the pods' BreakerReports; memberCounts
	// counts them all.
	// +optional
	// +listType=map
	// +listMapKey=pod
	// +kubebuilder:validation:MaxItems=20
	Members []MemberStatus `json:"members,omitempty"`

	// conditions are the latest observations of the breaker: Ready (its
	// configuration is valid and published), Open (its state is Open; with
	// scope Fleet, the fleet verdict) and ConfigApplied (every reporting pod
	// runs the published configuration).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
}

// CircuitBreaker declares a circuit breaker that application pods enforce with
// the Fusebox library. The operator publishes its configuration in the
// namespace's fusebox-breakers ConfigMap and reports on it here.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=cb,categories=fusebox
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`
// +kubebuilder:printcolumn:name="Scope",type=string,JSONPath=`.spec.scope`
// +kubebuilder:printcolumn:name="Open",type=integer,JSONPath=`.status.memberCounts.open`,description="Pods whose circuit is open"
// +kubebuilder:printcolumn:name="Pods",type=integer,JSONPath=`.status.memberCounts.reporting`,description="Running pods that report this breaker"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Open Timeout",type=string,JSONPath=`.spec.openTimeout`,priority=10
// +kubebuilder:printcolumn:name="Window",type=string,JSONPath=`.spec.window`,priority=10
// +kubebuilder:printcolumn:name="Failure Rate",type=integer,JSONPath=`.spec.failureRatePercent`,priority=10
// +kubebuilder:printcolumn:name="Quorum",type=integer,JSONPath=`.spec.fleetQuorumPercent`,priority=10
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 248",message="metadata.name must be at most 248 characters: the breaker is published under the ConfigMap key <name>.json, and keys are at most 253"
type CircuitBreaker struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec declares the breaker.
	// +optional
	// +kubebuilder:default={}
	Spec CircuitBreakerSpec `json:"spec,omitempty"`

	// status is what the operator and the pods observed.
	// +optional
	Status CircuitBreakerStatus `json:"status,omitempty"`
}

// CircuitBreakerList is a list of CircuitBreakers.
//
// +kubebuilder:object:root=true
type CircuitBreakerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CircuitBreaker `json:"items"`
}
