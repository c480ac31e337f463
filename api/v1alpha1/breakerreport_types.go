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

	// The pod's circuit.
	PodCircuit `json:",inline"`

	// reason is how the pod's circuit reached its state. Tripped (its calls),
	// Manual (Trip) and ProbeFailed open, and ProbesSucceeded closes, on the
	// pod's own evidence; Started, TimedOut, Adopted and Forced do not move a
	// fleet.
	// +required
	// +kubebuilder:validation:Enum=Started;Tripped;Manual;ProbeFailed;ProbesSucceeded;TimedOut;Adopted;Forced
	Reason string `json:"reason"`

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

	// inFlightPeak is the most calls the pod had in flight through this breaker at once
	// over its window; written, with limited and baseline, only for a breaker with
	// spec.concurrency (docs/design.md §12), and, like the traffic counts, at most once a
	// window unless something else changes. At most 1,000,000, the bound of
	// spec.concurrency.maxInFlight: no pod's share passes it.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000
	InFlightPeak *int64 `json:"inFlightPeak,omitempty"`

	// limited is the calls of the window the pod refused for being over its limit.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000000000
	Limited *int64 `json:"limited,omitempty"`

	// baseline is the pod's baseline latency of the breaker's calls, with
	// spec.concurrency.adaptive: the long-window latency its limiter compares the recent
	// one with. The operator publishes the median pod's to the fleet. A Go duration of at
	// most 1h.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule=`self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$') && duration(self) <= duration('1h')`,message="must be a duration of at most 1h, such as 12ms"
	Baseline *metav1.Duration `json:"baseline,omitempty"`

	// candidate is the pod's shadow judgement of the breaker's spec.candidate,
	// written while the configuration the pod runs has one.
	// +optional
	Candidate *CandidateReport `json:"candidate,omitempty"`
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
