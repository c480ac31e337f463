package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BreakerReportEntry is what one pod says of one of its breakers. It is the
// wire shape of breakerconfig.ReportEntry, which the pods write; a test keeps
// the two in step.
//
// A window's accepted, retried and throttled calls are among its requests, so
// none of them may pass requests (a count left out is 0).
// +kubebuilder:validation:XValidation:rule="!has(self.accepts) || self.accepts <= (has(self.requests) ? self.requests : 0)",message="must be at most requests: the accepted calls of a window are among its requests",fieldPath=".accepts"
// +kubebuilder:validation:XValidation:rule="!has(self.retries) || self.retries <= (has(self.requests) ? self.requests : 0)",message="must be at most requests: the retries of a window are among its requests",fieldPath=".retries"
// +kubebuilder:validation:XValidation:rule="!has(self.throttled) || self.throttled <= (has(self.requests) ? self.requests : 0)",message="must be at most requests: the throttled calls of a window are among its requests",fieldPath=".throttled"
type BreakerReportEntry struct {
	// The rules on this type cost a few comparisons each per entry: a
	// NodeBreakerReport holds up to 256 × 100 entries of it, and the API server
	// refuses a schema whose rules could cost more than its budget over them all.

	// name is the breaker's name, the name of its CircuitBreaker.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// state is the pod's circuit state.
	// +required
	State State `json:"state"`

	// since is when the pod's circuit reached its state, to the millisecond.
	// +required
	// +kubebuilder:validation:Format=date-time
	Since metav1.Time `json:"since"`

	// reason is how the pod's circuit reached its state. Tripped (its calls),
	// Manual (Trip) and ProbeFailed open, and ProbesSucceeded closes, on the
	// pod's own evidence; Started, TimedOut, Adopted and Forced do not move a
	// fleet.
	// +required
	// +kubebuilder:validation:Enum=Started;Tripped;Manual;ProbeFailed;ProbesSucceeded;TimedOut;Adopted;Forced
	Reason string `json:"reason"`

	// calls is how many calls the pod's window held at the transition. At most
	// 2^53−1, the largest count a JSON reader that holds numbers as doubles
	// reads exactly; it is shown, never summed.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=9007199254740991
	Calls *int64 `json:"calls,omitempty"`

	// failureRatePercent is the failure rate of the pod's window, in percent,
	// at the transition.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	FailureRatePercent *int32 `json:"failureRatePercent,omitempty"`

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
	// them off). 0 when closed. The operator takes the most any pod reports
	// (never a sum) and clamps it to what the CircuitBreaker's backoff can
	// reach, so the int32 range bounds it.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2147483647
	ConsecutiveOpens int32 `json:"consecutiveOpens,omitempty"`

	// openTimeout is the length of the current open period (while half-open,
	// of the last one), backed off by maxOpenTimeout.
	// +optional
	// +kubebuilder:validation:Type=string
	OpenTimeout *metav1.Duration `json:"openTimeout,omitempty"`

	// keys summarises the per-key breakers of a breaker Group, for a Group:
	// one entry for the Group, not one per key. Each count is at most 400,000,
	// so that the operator's sums over 5,000 pods fit int32.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self.keys <= 400000",message="must be at most 400000: no pod holds that many keys, and the operator sums this over pods",fieldPath=".keys"
	// +kubebuilder:validation:XValidation:rule="self.open <= 400000",message="must be at most 400000: no pod holds that many keys, and the operator sums this over pods",fieldPath=".open"
	// +kubebuilder:validation:XValidation:rule="self.halfOpen <= 400000",message="must be at most 400000: no pod holds that many keys, and the operator sums this over pods",fieldPath=".halfOpen"
	Keys *KeySummary `json:"keys,omitempty"`

	// requests is the calls the pod's closed circuit was asked to run over its
	// window, admitted or throttled, retries included; written, with accepts,
	// retries and throttled, only for a breaker with retryBudget or throttle.
	// The pod writes its traffic at most once a window unless its state
	// changes; the operator publishes the median pod's window to the fleet and
	// sums bounded shares of them into status.traffic. Each of the four is at
	// most 10^12 (MaxTrafficCount), so the sums over 5,000 pods stay exact;
	// accepts, retries and throttled are at most requests.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000000000
	Requests *int64 `json:"requests,omitempty"`

	// accepts is the calls of the window that succeeded.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000000000
	Accepts *int64 `json:"accepts,omitempty"`

	// retries is the second or later attempts of a call among requests.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000000000
	Retries *int64 `json:"retries,omitempty"`

	// throttled is the calls of the window adaptive throttling rejected.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000000000
	Throttled *int64 `json:"throttled,omitempty"`

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

// BreakerReport is one pod's report of its breakers' verdicts. Each pod that
// runs Fusebox writes exactly one, named after itself and owned by its Pod, and
// only when an entry changes; the operator reads them all and writes each
// CircuitBreaker's status. An admission policy lets a pod write no report but
// its own.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=brep,categories=fusebox
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BreakerReport struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// breakers holds one entry per breaker the pod runs and the namespace's
	// fusebox-breakers ConfigMap publishes.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=1000
	Breakers []BreakerReportEntry `json:"breakers,omitempty"`
}

// BreakerReportList is a list of BreakerReports.
//
// +kubebuilder:object:root=true
type BreakerReportList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BreakerReport `json:"items"`
}
