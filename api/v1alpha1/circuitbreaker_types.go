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

// Defaults of CircuitBreakerSpec, as the API server fills them in. Those of the policy
// fields are the library's too, stated once in breakerconfig; the others are the
// resource's own. TestDefaultMarkers holds the +kubebuilder:default markers to them.
const (
	DefaultOpenTimeout            = breakerconfig.DefaultOpenTimeout
	DefaultWindow                 = breakerconfig.DefaultWindow
	DefaultFailureRatePercent     = breakerconfig.DefaultFailureRatePercent
	DefaultMinimumThroughput      = breakerconfig.DefaultMinimumThroughput
	DefaultSuccessThreshold       = breakerconfig.DefaultSuccessThreshold
	DefaultHalfOpenPermittedCalls = breakerconfig.DefaultHalfOpenPermittedCalls
	DefaultFleetQuorumPercent     = 0
	DefaultSlowCallRatePercent    = breakerconfig.DefaultSlowCallRatePercent
	DefaultRetryBudgetPercent     = 20
	DefaultRetryMinPerSecond      = 10
	DefaultThrottleK              = 2.0
)

// CircuitBreakerSpec declares how a breaker judges a dependency.
// +kubebuilder:validation:XValidation:rule=`!has(self.maxOpenTimeout) || !has(self.openTimeout) || !self.maxOpenTimeout.matches('^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$') || !self.openTimeout.matches('^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$') || duration(self.maxOpenTimeout) >= duration(self.openTimeout)`,message="maxOpenTimeout must be at least openTimeout",fieldPath=".maxOpenTimeout"
// +kubebuilder:validation:XValidation:rule=`!has(self.candidate) || !has(self.candidate.maxOpenTimeout) || has(self.candidate.openTimeout) || !has(self.openTimeout) || !self.candidate.maxOpenTimeout.matches('^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$') || !self.openTimeout.matches('^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$') || duration(self.candidate.maxOpenTimeout) >= duration(self.openTimeout)`,message="must be at least openTimeout: the candidate sets no openTimeout of its own, so it is the spec's",fieldPath=".candidate.maxOpenTimeout"
// +kubebuilder:validation:XValidation:rule=`!has(self.candidate) || !has(self.candidate.openTimeout) || has(self.candidate.maxOpenTimeout) || !has(self.maxOpenTimeout) || !self.candidate.openTimeout.matches('^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$') || !self.maxOpenTimeout.matches('^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$') || duration(self.maxOpenTimeout) >= duration(self.candidate.openTimeout)`,message="must be at most maxOpenTimeout: the candidate sets no maxOpenTimeout of its own, so it is the spec's; set candidate.maxOpenTimeout too",fieldPath=".candidate.openTimeout"
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

	// retryBudget, when set, bounds the retries the pods make through this
	// breaker, for the whole fleet at once: over the window, each pod retries
	// at most percent% of its first attempts plus its share of minPerSecond,
	// which the operator divides among the reporting pods, so the floor does
	// not grow with the replica count. Unset (the default): retries are not
	// budgeted.
	// +optional
	RetryBudget *RetryBudget `json:"retryBudget,omitempty"`

	// throttle, when set, makes a closed circuit reject calls locally, before
	// they run, with probability max(0, (requests - k × accepts) / (requests +
	// 1)) over the window (client-side adaptive throttling); a pod with fewer
	// than minimumThroughput requests uses the fleet's requests and accepts,
	// which the operator publishes. Unset (the default): no throttling.
	// +optional
	Throttle *Throttle `json:"throttle,omitempty"`

	// concurrency, when set, limits the calls in flight through this breaker for the
	// whole fleet at once: the operator divides maxInFlight among the running pods that
	// report the breaker, and each pod refuses a call over its share (after maxWait) as a
	// short-circuit. Unset (the default): calls are not limited.
	// +optional
	Concurrency *Concurrency `json:"concurrency,omitempty"`

	// override holds the circuit open or closed until a given time, then hands
	// it back to mode, so a hold set during an incident cannot outlive it.
	// Who set it is recorded in the annotation fusebox.dev/overridden-by.
	// +optional
	Override *Override `json:"override,omitempty"`

	// candidate, when set, is a policy every pod judges in shadow on the same
	// calls: it never refuses one, and status.candidate shows what it would have
	// done beside what the enforced policy did. A field it leaves unset is the
	// spec's. `kubectl fusebox promote` makes it the spec.
	// +optional
	Candidate *CandidatePolicy `json:"candidate,omitempty"`
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
// +kubebuilder:printcolumn:name="Retry %",type=integer,JSONPath=`.status.traffic.retryPercent`,priority=10,description="The fleet's retries in percent of its first attempts, over the window"
// +kubebuilder:printcolumn:name="Throttled %",type=integer,JSONPath=`.status.traffic.throttledPercent`,priority=10,description="The fleet's calls rejected by adaptive throttling, in percent of its requests, over the window"
// +kubebuilder:printcolumn:name="In Flight",type=integer,JSONPath=`.status.concurrency.inFlight`,priority=10,description="The pods' peaks of calls in flight over their windows, added up, against spec.concurrency.maxInFlight"
// +kubebuilder:printcolumn:name="Limited",type=integer,JSONPath=`.status.concurrency.limited`,priority=10,description="Calls the pods refused over their share of spec.concurrency.maxInFlight, over their windows"
// +kubebuilder:printcolumn:name="Candidate",type=string,JSONPath=`.status.candidate.state`,priority=10,description="The state spec.candidate's policy, judged in shadow, has across the pods"
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
