package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// Mode says whether a breaker enforces its verdict, only reports it, or is held
// in one state by an operator. Each field of this type lists the values it
// takes (spec.mode all four, spec.override.mode the forced two): an enum on the
// type would be the schema of both.
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
	DefaultSlowCallRatePercent    = 100
)

// CircuitBreakerSpec declares how a breaker judges a dependency.
// +kubebuilder:validation:XValidation:rule=`!has(self.maxOpenTimeout) || !has(self.openTimeout) || !self.maxOpenTimeout.matches('^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$') || !self.openTimeout.matches('^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$') || duration(self.maxOpenTimeout) >= duration(self.openTimeout)`,message="maxOpenTimeout must be at least openTimeout",fieldPath=".maxOpenTimeout"
type CircuitBreakerSpec struct {
	// Each duration field says "must be a duration such as 30s or 1m30s" itself,
	// in CEL, rather than with an OpenAPI pattern, whose message is the regular
	// expression. Its other rules hold only for a string that matches, so a
	// string that is no duration gets that one line, not a second one about a
	// failed conversion; and the whole-milliseconds rule holds only above the
	// floor, so "999us" is told the floor alone. Nothing here is an OpenAPI maxLength or enum: those
	// violations stop the API server from running any CEL rule and add a line
	// of their own ("some validation rules were not checked"), so the duration
	// fields have neither.

	// openTimeout is how long the circuit stays open before it lets probe calls
	// through (half-open). A Go duration between 1s and 24h, such as "30s" or "2m".
	// +optional
	// +kubebuilder:default="30s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule=`self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$')`,message="must be a duration such as 30s or 1m30s"
	// +kubebuilder:validation:XValidation:rule=`!self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$') || (duration(self) >= duration('1s') && duration(self) <= duration('24h'))`,message="must be between 1s and 24h"
	// +kubebuilder:validation:XValidation:rule=`!self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$') || duration(self) < duration('1s') || int(duration(self)) % 1000000 == 0`,message="must be a whole number of milliseconds"
	OpenTimeout *metav1.Duration `json:"openTimeout,omitempty"`

	// window is the width of each of the two buckets of the rolling window in
	// which failures are counted. A Go duration between 1s and 1h.
	// +optional
	// +kubebuilder:default="10s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule=`self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$')`,message="must be a duration such as 30s or 1m30s"
	// +kubebuilder:validation:XValidation:rule=`!self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$') || (duration(self) >= duration('1s') && duration(self) <= duration('1h'))`,message="must be between 1s and 1h"
	// +kubebuilder:validation:XValidation:rule=`!self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$') || duration(self) < duration('1s') || int(duration(self)) % 1000000 == 0`,message="must be a whole number of milliseconds"
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
	// evidence. 1 to 1,000,000.
	// +optional
	// +kubebuilder:default=20
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000
	MinimumThroughput *int32 `json:"minimumThroughput,omitempty"`

	// successThreshold is how many consecutive successful probes close a
	// half-open circuit, over the whole half-open period: probes run one after
	// another as slots free up, so it may exceed halfOpenPermittedCalls.
	// 1 to 1000.
	// +optional
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	SuccessThreshold *int32 `json:"successThreshold,omitempty"`

	// halfOpenPermittedCalls caps how many probe calls run at the same time in
	// each pod while the circuit is half-open; callers over the cap are
	// short-circuited. 1 to 1000.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	HalfOpenPermittedCalls *int32 `json:"halfOpenPermittedCalls,omitempty"`

	// mode is Enforce (short-circuit while open), MetricsOnly (judge and report,
	// never refuse a call), ForcedOpen or ForcedClosed (hold the circuit in that
	// state until the mode changes).
	// +optional
	// +kubebuilder:default=Enforce
	// +kubebuilder:validation:Enum=Enforce;MetricsOnly;ForcedOpen;ForcedClosed
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

	// slowCallDuration, when set, makes every call that takes at least this long
	// slow, whether it succeeds or fails, and the circuit also opens when slow
	// calls reach slowCallRatePercent of the window (with at least
	// minimumThroughput calls in it). A dependency that answers in 9s instead of
	// 90ms is down for its callers even though every call succeeds. A Go
	// duration between 1ms and 1h. Unset (the default): no call is judged slow.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule=`self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$')`,message="must be a duration such as 30s or 1m30s"
	// +kubebuilder:validation:XValidation:rule=`!self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$') || (duration(self) >= duration('1ms') && duration(self) <= duration('1h'))`,message="must be between 1ms and 1h"
	// +kubebuilder:validation:XValidation:rule=`!self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$') || duration(self) < duration('1ms') || int(duration(self)) % 1000000 == 0`,message="must be a whole number of milliseconds"
	SlowCallDuration *metav1.Duration `json:"slowCallDuration,omitempty"`

	// slowCallRatePercent is the share of slow calls in the window, in percent,
	// at or above which the circuit opens; used only with slowCallDuration.
	// 1 to 100.
	// +optional
	// +kubebuilder:default=100
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	SlowCallRatePercent *int32 `json:"slowCallRatePercent,omitempty"`

	// maxOpenTimeout, when set, backs off a dependency that stays down: each
	// open period that follows another without a close in between lasts twice
	// as long as the one before, from openTimeout up to maxOpenTimeout; closing
	// starts again from openTimeout. A Go duration, at least openTimeout and at
	// most 24h. Unset (the default): every open period lasts openTimeout.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule=`self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$')`,message="must be a duration such as 30s or 1m30s"
	// +kubebuilder:validation:XValidation:rule=`!self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$') || duration(self) <= duration('24h')`,message="must be at most 24h"
	// +kubebuilder:validation:XValidation:rule=`!self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$') || int(duration(self)) % 1000000 == 0`,message="must be a whole number of milliseconds"
	MaxOpenTimeout *metav1.Duration `json:"maxOpenTimeout,omitempty"`

	// override holds the circuit open or closed until a given time, then hands
	// it back to mode, so a hold set during an incident cannot outlive it.
	// Who set it is recorded in the annotation fusebox.dev/overridden-by.
	// +optional
	Override *Override `json:"override,omitempty"`
}

// Override is a time-boxed, audited hold of the circuit in one state.
type Override struct {
	// mode is the mode in force until until: ForcedOpen or ForcedClosed.
	// +required
	// +kubebuilder:validation:Enum=ForcedOpen;ForcedClosed
	Mode Mode `json:"mode"`

	// until is when the override ends and spec.mode applies again: in the
	// future when set, and at most 7 days ahead.
	// +required
	// +kubebuilder:validation:Format=date-time
	Until metav1.Time `json:"until"`

	// reason says why the circuit is held, for whoever looks during the
	// incident. 1 to 256 characters, not all of them blank.
	// +required
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule=`self.trim() != ''`,message="must say why the circuit is held (an incident reference, say), not be blank"
	Reason string `json:"reason"`
}

// MaxOverrideDuration is how far ahead an override's until may be.
const MaxOverrideDuration = 7 * 24 * time.Hour

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

	// slowCallRatePercent is the slow-call rate of the window, in percent, at
	// the transition; set when the breaker judges slow calls.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	SlowCallRatePercent *int32 `json:"slowCallRatePercent,omitempty"`

	// trigger says what opened the circuit, for reasons Tripped and
	// ProbeFailed: FailureRate, SlowCallRate, FailedProbe or SlowProbe.
	// +optional
	// +kubebuilder:validation:Enum=FailureRate;SlowCallRate;FailedProbe;SlowProbe
	Trigger string `json:"trigger,omitempty"`

	// consecutiveOpens is how many open periods in a row the circuit has had,
	// counting the current one, with no close in between (maxOpenTimeout backs
	// them off). 0 when closed.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ConsecutiveOpens int32 `json:"consecutiveOpens,omitempty"`

	// openTimeout is the length of the current open period (while half-open,
	// of the last one), backed off by maxOpenTimeout.
	// +optional
	// +kubebuilder:validation:Type=string
	OpenTimeout *metav1.Duration `json:"openTimeout,omitempty"`

	// keys summarises the per-key breakers of a breaker Group, for a Group.
	// +optional
	Keys *KeySummary `json:"keys,omitempty"`

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

// MaxGroupKeys bounds each count of the KeySummary a pod reports (a rule of
// BreakerReport's keys, not of the type: the CircuitBreaker's status.keys holds
// the sums, which may go higher). A Group keeps
// DefaultMaxKeys (1024) breakers unless told otherwise, and each costs memory,
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
	// names the keys open in the most pods.
	// +optional
	Keys *KeySummary `json:"keys,omitempty"`

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

// CircuitBreaker declares a circuit breaker that application pods enforce with
// the Fusebox library. The operator publishes its configuration in the
// namespace's fusebox-breakers ConfigMap and reports on it here.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=cb,categories=fusebox
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`
// +kubebuilder:printcolumn:name="Overridden",type=string,JSONPath=`.status.conditions[?(@.type=="Overridden")].status`,description="True while spec.override holds the circuit in place of mode"
// +kubebuilder:printcolumn:name="Scope",type=string,JSONPath=`.spec.scope`
// +kubebuilder:printcolumn:name="Open",type=integer,JSONPath=`.status.memberCounts.open`,description="Pods whose circuit is open"
// +kubebuilder:printcolumn:name="Pods",type=integer,JSONPath=`.status.memberCounts.reporting`,description="Running pods that report this breaker"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Open Timeout",type=string,JSONPath=`.spec.openTimeout`,priority=10
// +kubebuilder:printcolumn:name="Slow Call",type=string,JSONPath=`.spec.slowCallDuration`,priority=10,description="How long a call takes to count as slow"
// +kubebuilder:printcolumn:name="Max Open",type=string,JSONPath=`.spec.maxOpenTimeout`,priority=10,description="The longest a backed-off open period lasts"
// +kubebuilder:printcolumn:name="Opens",type=integer,JSONPath=`.status.consecutiveOpens`,priority=10,description="Consecutive open periods with no close in between"
// +kubebuilder:printcolumn:name="Window",type=string,JSONPath=`.spec.window`,priority=10
// +kubebuilder:printcolumn:name="Failure Rate",type=integer,JSONPath=`.spec.failureRatePercent`,priority=10
// +kubebuilder:printcolumn:name="Quorum",type=integer,JSONPath=`.spec.fleetQuorumPercent`,priority=10
// +kubebuilder:printcolumn:name="Override Until",type=string,JSONPath=`.spec.override.until`,priority=10,description="When spec.override ends (or ended: see Overridden)"
type CircuitBreaker struct {
	// A name longer than 248 characters (breakerconfig.MaxKeyNameLength) is
	// refused by the admission policy fusebox-circuitbreaker-name (config/policy)
	// and by the validating webhook, not by a rule here: a rule of the CRD's
	// root has no field path (controller-gen gives the root metadata no
	// properties to point at), and the API server would report it on "<nil>".

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
