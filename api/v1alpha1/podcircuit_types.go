package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PodCircuit is what a pod says of its circuit for one breaker: its state, the window
// behind the last transition and the configuration it runs. A BreakerReport's entries
// (and so a NodeBreakerReport's) and a CircuitBreaker's status.members carry it inline,
// so that the operator copies a pod's line into the status field by field and the two
// cannot drift apart. The pods' own Go shape of an entry is breakerconfig.ReportEntry,
// which a test holds to BreakerReportEntry.
type PodCircuit struct {
	// state is the pod's circuit state.
	// +required
	State State `json:"state"`

	// since is when the pod's circuit reached its state; a pod writes it to the
	// millisecond.
	// +required
	// +kubebuilder:validation:Format=date-time
	Since metav1.Time `json:"since"`

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
