package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CandidatePolicy is a policy the pods judge in shadow beside the one they enforce
// (docs/design.md §11): every pod feeds it the outcomes of the calls that ran and counts
// what it would have done, but it never refuses a call. Each field has the bounds of the
// spec's field of the same name; a field left unset takes the spec's value, so a candidate
// names only what it changes.
//
// The whole-millisecond and bound rules are the spec's, spelled again: a rule on a
// duration cannot be shared between two fields by reference.
// +kubebuilder:validation:XValidation:rule=`!has(self.maxOpenTimeout) || !has(self.openTimeout) || !self.maxOpenTimeout.matches('^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$') || !self.openTimeout.matches('^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$') || duration(self.maxOpenTimeout) >= duration(self.openTimeout)`,message="maxOpenTimeout must be at least openTimeout",fieldPath=".maxOpenTimeout"
type CandidatePolicy struct {
	// openTimeout is how long the candidate's circuit would stay open before it
	// lets probe calls through. A Go duration between 1s and 24h; unset, the
	// spec's openTimeout.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule=`self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$')`,message="must be a duration such as 30s or 1m30s"
	// +kubebuilder:validation:XValidation:rule=`!self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$') || (duration(self) >= duration('1s') && duration(self) <= duration('24h'))`,message="must be between 1s and 24h"
	// +kubebuilder:validation:XValidation:rule=`!self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$') || duration(self) < duration('1s') || int(duration(self)) % 1000000 == 0`,message="must be a whole number of milliseconds"
	OpenTimeout *metav1.Duration `json:"openTimeout,omitempty"`

	// window is the width of each of the two buckets of the candidate's rolling
	// window. A Go duration between 1s and 1h; unset, the spec's window.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule=`self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$')`,message="must be a duration such as 30s or 1m30s"
	// +kubebuilder:validation:XValidation:rule=`!self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$') || (duration(self) >= duration('1s') && duration(self) <= duration('1h'))`,message="must be between 1s and 1h"
	// +kubebuilder:validation:XValidation:rule=`!self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$') || duration(self) < duration('1s') || int(duration(self)) % 1000000 == 0`,message="must be a whole number of milliseconds"
	Window *metav1.Duration `json:"window,omitempty"`

	// failureRatePercent is the failure rate, in percent, at or above which the
	// candidate would open. 1 to 100; unset, the spec's.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	FailureRatePercent *int32 `json:"failureRatePercent,omitempty"`

	// minimumThroughput is how many calls the candidate's window must hold before
	// it judges the failure rate. 1 to 1,000,000; unset, the spec's.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000
	MinimumThroughput *int32 `json:"minimumThroughput,omitempty"`

	// successThreshold is how many consecutive successful probes would close the
	// candidate's half-open circuit. 1 to 1000; unset, the spec's.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	SuccessThreshold *int32 `json:"successThreshold,omitempty"`

	// halfOpenPermittedCalls caps how many calls at a time the candidate takes as
	// probes while half-open; the calls over the cap are calls it would have
	// refused. 1 to 1000; unset, the spec's.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	HalfOpenPermittedCalls *int32 `json:"halfOpenPermittedCalls,omitempty"`

	// slowCallDuration makes every call that takes at least this long slow for
	// the candidate. A Go duration between 1ms and 1h; unset, the spec's (and no
	// call is slow if the spec sets none either).
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule=`self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$')`,message="must be a duration such as 30s or 1m30s"
	// +kubebuilder:validation:XValidation:rule=`!self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$') || (duration(self) >= duration('1ms') && duration(self) <= duration('1h'))`,message="must be between 1ms and 1h"
	// +kubebuilder:validation:XValidation:rule=`!self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$') || duration(self) < duration('1ms') || int(duration(self)) % 1000000 == 0`,message="must be a whole number of milliseconds"
	SlowCallDuration *metav1.Duration `json:"slowCallDuration,omitempty"`

	// slowCallRatePercent is the slow-call rate, in percent, at or above which the
	// candidate would open; used only with a slowCallDuration (the candidate's or
	// the spec's). 1 to 100; unset, the spec's.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	SlowCallRatePercent *int32 `json:"slowCallRatePercent,omitempty"`

	// maxOpenTimeout backs off the candidate's consecutive open periods up to it.
	// A Go duration, at least the candidate's openTimeout and at most 24h; unset,
	// the spec's (no backoff if the spec sets none either).
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule=`self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$')`,message="must be a duration such as 30s or 1m30s"
	// +kubebuilder:validation:XValidation:rule=`!self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$') || duration(self) <= duration('24h')`,message="must be at most 24h"
	// +kubebuilder:validation:XValidation:rule=`!self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$') || int(duration(self)) % 1000000 == 0`,message="must be a whole number of milliseconds"
	MaxOpenTimeout *metav1.Duration `json:"maxOpenTimeout,omitempty"`
}

// CandidateReport is what one pod says of the candidate it judges beside one breaker:
// the candidate's state and counts, and the enforced policy's over the same span, so
// that the two compare like for like. Its counts change with every call the candidate
// would refuse, so a pod writes them with its other changes and on its own at most once
// a window; its state changes are written like any other.
type CandidateReport struct {
	// state is the candidate's circuit state in the pod.
	// +required
	State State `json:"state"`

	// since is when the candidate reached its state, to the millisecond.
	// +required
	// +kubebuilder:validation:Format=date-time
	Since metav1.Time `json:"since"`

	// opens is how many times the candidate opened since startTime.
	// +required
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000000000
	Opens int64 `json:"opens"`

	// wouldRefuse is how many calls the candidate would have refused since
	// startTime: calls that ran, because the enforced policy let them, while the
	// candidate was open or had its probe slots full.
	// +required
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000000000
	WouldRefuse int64 `json:"wouldRefuse"`

	// startTime is when the pod began judging this candidate: the span every count
	// here covers.
	// +optional
	// +kubebuilder:validation:Format=date-time
	StartTime *metav1.Time `json:"startTime,omitempty"`

	// timeOpen is how long the candidate was open or half-open since startTime,
	// up to when the pod wrote this.
	// +optional
	// +kubebuilder:validation:Type=string
	TimeOpen *metav1.Duration `json:"timeOpen,omitempty"`

	// enforced is what the enforced policy did over the same span.
	// +optional
	Enforced *CandidateBaseline `json:"enforced,omitempty"`
}

// CandidateBaseline is what the enforced policy did over a candidate's span: what the
// candidate is compared with.
type CandidateBaseline struct {
	// opens is how many times the enforced circuit opened.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000000000
	Opens int64 `json:"opens"`

	// refused is how many calls the enforced circuit short-circuited because it
	// was open or had its probe slots full (not those adaptive throttling
	// rejected, which status.traffic counts).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000000000
	Refused int64 `json:"refused"`

	// timeOpen is how long the enforced circuit was open or half-open.
	// +optional
	// +kubebuilder:validation:Type=string
	TimeOpen *metav1.Duration `json:"timeOpen,omitempty"`
}

// MaxCandidateCount bounds each count of a CandidateReport: the BreakerReport schema
// refuses a higher one, so that the operator's sums over 5,000 pods stay below 2^53.
const MaxCandidateCount = MaxTrafficCount

// CandidateStatus is what the pods' shadow judgements of spec.candidate add up to. Only
// the running pods that run the configuration of observedGeneration count: a pod behind
// may still judge an earlier candidate. One pod, one share (docs/design.md §5.17): the
// state is the one at least half of the pods hold (or a worse one), a count sums each
// pod's for at most four times the upper median pod's, and a time is the median pod's,
// so that fewer than half of the pods cannot move a figure outside what the others
// report.
type CandidateStatus struct {
	// pods is how many running pods judge the candidate of this generation.
	// +kubebuilder:validation:Minimum=0
	Pods int32 `json:"pods"`

	// state is the candidate's state across those pods: Open when at least half
	// of them have it open (with scope Fleet, and at least the quorum of
	// fleetQuorumPercent), HalfOpen when at least half have it open or
	// half-open, else Closed. Empty until a pod reports it.
	// +optional
	State State `json:"state,omitempty"`

	// since is when the operator saw state become what it is.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`

	// open is how many of the pods have the candidate open.
	// +kubebuilder:validation:Minimum=0
	Open int32 `json:"open"`

	// halfOpen is how many of the pods have the candidate half-open.
	// +kubebuilder:validation:Minimum=0
	HalfOpen int32 `json:"halfOpen"`

	// opens is how many times the candidate opened, summed over the pods (at
	// most 10^12).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000000000
	Opens int64 `json:"opens"`

	// wouldRefuse is how many calls the candidate would have refused, summed over
	// the pods (at most 10^12): calls that ran because the enforced policy let
	// them.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000000000
	WouldRefuse int64 `json:"wouldRefuse"`

	// startTime is when the median pod began judging the candidate.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`

	// timeOpen is how long the median pod had the candidate open or half-open.
	// +optional
	// +kubebuilder:validation:Type=string
	TimeOpen *metav1.Duration `json:"timeOpen,omitempty"`

	// enforced is the enforced policy over the same spans, added up the same way
	// (each sum at most 10^12): what the candidate is compared with.
	// +optional
	Enforced *CandidateBaseline `json:"enforced,omitempty"`
}
