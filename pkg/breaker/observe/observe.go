package observe

import (
	"fmt"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker/internal/circuit"
)

// Outcome is what the breaker made of one call.
type Outcome uint8

// The outcomes of a call.
const (
	OutcomeSuccess Outcome = iota // recorded as a success
	OutcomeFailure                // recorded as a failure
	// OutcomeIgnored means the call ran but was recorded as neither, because the caller
	// gave up (context.Canceled), because it was admitted in an earlier state period (a
	// stale result), or because it ran under MetricsOnly although Enforce would have
	// refused it.
	OutcomeIgnored
	OutcomeRejected // short-circuited: the protected function never ran
)

func (o Outcome) String() string {
	switch o {
	case OutcomeSuccess:
		return "success"
	case OutcomeFailure:
		return "failure"
	case OutcomeIgnored:
		return "ignored"
	case OutcomeRejected:
		return "rejected"
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// RejectReason says why a call was short-circuited.
type RejectReason uint8

// The reasons a call is short-circuited.
const (
	RejectNone              RejectReason = iota
	RejectOpen                           // the circuit is open
	RejectHalfOpenSaturated              // half-open, and the probe cap is reached
	RejectForcedOpen                     // the mode is ForcedOpen
	RejectThrottled                      // closed, and adaptive throttling rejected the call (§5.16)
)

func (r RejectReason) String() string {
	switch r {
	case RejectNone:
		return ""
	case RejectOpen:
		return "open"
	case RejectHalfOpenSaturated:
		return "half_open_saturated"
	case RejectForcedOpen:
		return "forced_open"
	case RejectThrottled:
		return "throttled"
	}
	return fmt.Sprintf("RejectReason(%d)", uint8(r))
}

// TransitionCause says what moved the state. Shared-verdict stores use it not to publish
// back what they were told (CauseAdopted).
type TransitionCause uint8

// The causes of a transition.
const (
	CauseCalls   TransitionCause = iota // the breaker's own judgement of calls
	CauseTimeout                        // time: open → half-open, or a half-open period whose probes never answered → open
	CauseTrip                           // Trip
	CauseMode                           // a mode change by Update forced the state
	CauseAdopted                        // Adopt: a verdict reached elsewhere
)

func (c TransitionCause) String() string {
	switch c {
	case CauseCalls:
		return "calls"
	case CauseTimeout:
		return "timeout"
	case CauseTrip:
		return "trip"
	case CauseMode:
		return "mode"
	case CauseAdopted:
		return "adopted"
	}
	return fmt.Sprintf("TransitionCause(%d)", uint8(c))
}

// Trigger says which judgement of calls opened a circuit.
type Trigger uint8

// The judgements that open a circuit on its calls.
const (
	TriggerNone         Trigger = iota // not opened by calls (Trip, time, a mode, a verdict), or not opened
	TriggerFailureRate                 // failures reached FailureRatio of the window
	TriggerSlowCallRate                // slow calls reached SlowCallRatio of the window
	TriggerFailedProbe                 // a half-open probe failed
	TriggerSlowProbe                   // a half-open probe was slow
)

func (t Trigger) String() string {
	switch t {
	case TriggerNone:
		return ""
	case TriggerFailureRate:
		return "failure_rate"
	case TriggerSlowCallRate:
		return "slow_call_rate"
	case TriggerFailedProbe:
		return "failed_probe"
	case TriggerSlowProbe:
		return "slow_probe"
	}
	return fmt.Sprintf("Trigger(%d)", uint8(t))
}

// Transition describes one change of state: From and To always differ. Trip on an open
// circuit restarts the open period without a Transition (see breaker.Breaker.Trip).
type Transition struct {
	Breaker  string
	From, To circuit.State
	// At is when the new state was reached; for an adopted verdict, the verdict's Since.
	At time.Time
	// Counts are the counts behind the transition, taken before any reset: the window's
	// tally that opened the circuit, or the probe counts that closed or re-opened it.
	Counts circuit.Counts
	// Err is the failure that caused the transition, if one did.
	Err   error
	Cause TransitionCause
	// Trigger says which judgement of calls opened the circuit, for Cause CauseCalls and
	// To Open; Counts holds the figures (Failures or Slow over Calls).
	Trigger Trigger
	// ConsecutiveOpens and OpenTimeout describe the open period entered, for To Open (and
	// the one just ended, for To HalfOpen): as in breaker.Verdict.
	ConsecutiveOpens int
	OpenTimeout      time.Duration
	// Period is the state period entered. It grows by one on every transition of the
	// breaker; observers can use it to order deliveries made from different goroutines.
	Period uint64
}

// CallEvent describes one call as the breaker judged it.
type CallEvent struct {
	Breaker  string
	Outcome  Outcome
	Reason   RejectReason  // why, for OutcomeRejected
	Initial  circuit.State // the state the call was admitted (or refused) in
	Final    circuit.State // the state after its outcome was recorded
	Err      error         // what the protected function returned; nil on success
	Panicked bool
	// Slow says the call took at least SlowCallDuration (only judged when it is set; a
	// call the caller gave up on, context.Canceled, is never slow).
	Slow bool
}

// FallbackReason says why Call ran the Open callback.
type FallbackReason uint8

// The reasons Call runs the Open callback.
const (
	FallbackOpen              FallbackReason = iota // short-circuited by an open (or forced-open) circuit
	FallbackHalfOpenSaturated                       // short-circuited by the half-open probe cap
	FallbackFailure                                 // the protected callback failed
)

func (f FallbackReason) String() string {
	switch f {
	case FallbackOpen:
		return "open"
	case FallbackHalfOpenSaturated:
		return "half_open_saturated"
	case FallbackFailure:
		return "failure"
	}
	return fmt.Sprintf("FallbackReason(%d)", uint8(f))
}

// Observer sees every transition of the breakers it is given to. OnTransition runs
// synchronously on the goroutine that caused the transition, after the breaker's lock is
// released (so it may call the breaker), and must not block for long: hand slow work, such
// as a network write, to another goroutine. Deliveries from different goroutines may arrive
// out of order; [Transition.Period] orders them.
type Observer interface {
	OnTransition(Transition)
}

// ObserverFunc is a function used as an Observer: breaker.WithObserver(observe.ObserverFunc(
// func(t observe.Transition) { ... })).
type ObserverFunc func(Transition)

// OnTransition calls f(t).
func (f ObserverFunc) OnTransition(t Transition) { f(t) }

// CallObserver is an Observer that sees every call too. Breakers without
// a CallObserver skip this bookkeeping entirely, so only those that want it pay per call.
type CallObserver interface {
	Observer
	// OnCallStart: an admitted call starts (one more active call).
	OnCallStart(breaker string, s circuit.State)
	// OnCallEnd: an admitted call ended (one fewer active call), or a call was refused
	// (Outcome == OutcomeRejected, with no OnCallStart before it).
	OnCallEnd(CallEvent)
	// OnFallback: Call ran the Open callback.
	OnFallback(breaker string, reason FallbackReason, cause error)
}

// RetryObserver is an Observer that also sees every retry asked of a budgeted breaker.
// Breakers without one pay nothing for it.
type RetryObserver interface {
	Observer
	// OnRetry: a retry was allowed (and is then a call like any other), or the budget
	// refused it.
	OnRetry(breaker string, allowed bool)
}
