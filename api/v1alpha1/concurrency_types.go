package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// Defaults and bounds of spec.concurrency (docs/design.md §12). The defaults are the
// library's too, stated once in breakerconfig; TestDefaultMarkers holds the CRD's
// +kubebuilder:default markers to them.
const (
	DefaultMaxWait           = breakerconfig.DefaultMaxWait
	DefaultAdaptiveTolerance = breakerconfig.DefaultAdaptiveTolerance
	DefaultAdaptiveMinLimit  = breakerconfig.DefaultAdaptiveMinLimit
	// MaxInFlight bounds spec.concurrency.maxInFlight, and so every pod's share and the
	// in-flight peak a pod reports.
	MaxInFlight = breakerconfig.MaxInFlight
)

// Concurrency is one bulkhead for the fleet (docs/design.md §12): a limit on the calls in
// flight through the breaker across all of its pods, which the operator divides among
// them. A per-pod limit multiplies with the replica count; this one does not.
//
// maxInFlight must be set; the rule is CEL rather than the schema's required, whose
// violation stops the API server from running any CEL rule and adds a line of its own
// ("some validation rules were not checked"), as an enum's does (CircuitBreakerSpec).
// +kubebuilder:validation:XValidation:rule="has(self.maxInFlight)",message="must be set: the most calls the whole fleet may have in flight at once",fieldPath=".maxInFlight"
type Concurrency struct {
	// maxInFlight is how many calls the whole fleet may have in flight through this
	// breaker at once. The operator gives each running pod that reports the breaker an
	// equal share, rounded down and at least 1, and divides it again as pods come and go;
	// a pod over its share refuses the call (after maxWait) as a short-circuit, which
	// counts for nothing toward opening. 1 to 1,000,000.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000
	MaxInFlight int32 `json:"maxInFlight"`

	// maxWait is how long a call over the pod's share waits for a call in flight to
	// finish before it is refused. A Go duration between 0s and 10s; 0s (the default)
	// refuses it at once.
	// +optional
	// +kubebuilder:default="0s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule=`self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$')`,message="must be a duration such as 0s or 250ms"
	// +kubebuilder:validation:XValidation:rule=`!self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$') || duration(self) <= duration('10s')`,message="must be between 0s and 10s"
	// +kubebuilder:validation:XValidation:rule=`!self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$') || int(duration(self)) % 1000000 == 0`,message="must be a whole number of milliseconds"
	MaxWait *metav1.Duration `json:"maxWait,omitempty"`

	// adaptive, when set, lets each pod lower its limit below its share while the
	// dependency slows down (never raise it above): a gradient limiter that compares the
	// recent latency with the fleet's baseline. Unset (the default): each pod's limit is
	// its share.
	// +optional
	Adaptive *AdaptiveConcurrency `json:"adaptive,omitempty"`
}

// AdaptiveConcurrency tunes the pods' gradient limiters (docs/design.md §12).
//
// tolerance is a float64, as throttle.k is and for the same reasons (docs/design.md §3):
// a JSON number on the way in and on the wire, bounded by the schema.
type AdaptiveConcurrency struct {
	// tolerance is how many times the fleet's baseline latency the recent latency may
	// reach before a pod lowers its limit: 1.5 (the default) lowers it once calls take
	// half as long again as usual. 1.0 to 5.0.
	// +optional
	// +kubebuilder:default=1.5
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=5
	Tolerance *float64 `json:"tolerance,omitempty"`

	// minLimit is the lowest a pod's limiter takes its limit, however slow the
	// dependency: at least 1 (the default), at most 1,000,000. A share below it stays the
	// pod's limit.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000
	MinLimit *int32 `json:"minLimit,omitempty"`
}

// FleetConcurrency is what the fleet's limit on calls in flight comes to (docs/design.md
// §12): how the operator divided it, and what the pods report of their windows, each pod
// counting for a bounded share (docs/design.md §5.17).
type FleetConcurrency struct {
	// maxInFlight is spec.concurrency.maxInFlight, the limit for the whole fleet.
	// +kubebuilder:validation:Minimum=0
	MaxInFlight int32 `json:"maxInFlight"`

	// pods is how many pods the limit is divided among: the running pods that report
	// this breaker, each once.
	// +kubebuilder:validation:Minimum=0
	Pods int32 `json:"pods"`

	// share is each pod's part of the limit, as published: maxInFlight divided by pods,
	// rounded down, at least 1.
	// +kubebuilder:validation:Minimum=0
	Share int32 `json:"share"`

	// inFlight adds up the pods' peaks of calls in flight over their windows, each pod's
	// at most its share: how close the fleet came to its limit. The peaks of different
	// pods need not have been at the same moment, so the sum can pass what was ever in
	// flight at once, never share × pods.
	// +kubebuilder:validation:Minimum=0
	InFlight int64 `json:"inFlight"`

	// limited adds up the calls the pods refused over their limit in their windows, each
	// pod's at most four times the median pod's (or minimumThroughput, if more).
	// +kubebuilder:validation:Minimum=0
	Limited int64 `json:"limited"`
}
