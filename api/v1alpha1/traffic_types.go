package v1alpha1

import "github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"

// RetryBudget bounds a fleet's retries through one breaker (docs/design.md §5.15).
type RetryBudget struct {
	// percent is how many retries each pod may make over the window, in percent
	// of its first attempts (the calls that were not retries). 1 to 100.
	// +optional
	// +kubebuilder:default=20
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	Percent *int32 `json:"percent,omitempty"`

	// minPerSecond is the floor of retries per second the whole fleet may make
	// whatever its first attempts, so a quiet service can still retry. The
	// operator divides it among the reporting pods (each pod gets minPerSecond /
	// pods of it), so it does not multiply with the replica count. 0 to 10000.
	// +optional
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	MinPerSecond *int32 `json:"minPerSecond,omitempty"`
}

// Throttle is client-side adaptive throttling (docs/design.md §5.16).
//
// k is a float64, which Kubernetes API conventions discourage and controller-gen
// accepts only with crd:allowDangerousTypes: the design makes it a JSON number
// (docs/design.md §3, §4), so a string would not do, and a resource.Quantity is
// served back as a string ("1500m") that no reader of a multiplier expects. A
// float64 survives encoding/json unchanged (the shortest form that reads back the
// same), JSON has no NaN or infinity to smuggle in, and the schema bounds it.
// The status stays integer.
type Throttle struct {
	// k is how many requests per accepted one the pods send before they start
	// rejecting calls locally: 2 lets through twice what the dependency
	// accepts, the usual choice; closer to 1 rejects sooner and wastes less of
	// the dependency's effort, higher rejects later. 1.0 to 10.0.
	// +optional
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	K *float64 `json:"k,omitempty"`
}

// MaxTrafficCount bounds each traffic count a pod reports (requests, accepts,
// retries, throttled over its window): the BreakerReport schema refuses a higher
// one. The operator's sums over 5,000 pods then stay below 2^53 (5,000 × 10^12 =
// 5·10^15), exact as JSON numbers and far from overflowing int64; a pod making
// 10^12 calls in a window of at most an hour would make 2.8·10^8 a second.
const MaxTrafficCount = breakerconfig.MaxTrafficCount

// FleetTraffic is what the reporting pods' windows hold, summed, for a breaker with
// a retry budget or adaptive throttling. One pod's window counts for at most four
// times the median pod's requests (or minimumThroughput, if more), scaled in
// proportion, so that no pod's report moves the sums or their ratios much
// (docs/design.md §5.17). Percentages are whole numbers from 0 to 100, rounded:
// the API conventions keep floats out of status.
type FleetTraffic struct {
	// pods is how many running pods report this breaker: the count the operator
	// publishes, among which the retry budget's floor is divided.
	Pods int32 `json:"pods"`

	// requests are the calls the pods' closed circuits were asked to run over
	// their windows, admitted or throttled, retries included.
	// +kubebuilder:validation:Minimum=0
	Requests int64 `json:"requests"`

	// accepts are the calls that succeeded.
	// +kubebuilder:validation:Minimum=0
	Accepts int64 `json:"accepts"`

	// retries are the admitted second or later attempts of a call.
	// +kubebuilder:validation:Minimum=0
	Retries int64 `json:"retries"`

	// throttled are the calls adaptive throttling rejected.
	// +kubebuilder:validation:Minimum=0
	Throttled int64 `json:"throttled"`

	// retryPercent is retries in percent of first attempts (requests that
	// were not retries), rounded: the fleet's retry ratio. At most 100: a
	// fleet whose budget floor allowed more retries than first attempts shows
	// 100. Unset while there are no first attempts.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	RetryPercent *int32 `json:"retryPercent,omitempty"`

	// throttledPercent is throttled in percent of requests, rounded: the
	// fleet's throttle rejection ratio. Unset while there are no requests.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	ThrottledPercent *int32 `json:"throttledPercent,omitempty"`
}
