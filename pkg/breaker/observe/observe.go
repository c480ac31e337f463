package observe

import (
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker/internal/circuit"
)

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
	Err error
	// Reason says what moved the state, in the words a pod's report uses for it
	// (breakerconfig.ReasonTripped, ReasonManual, ReasonProbeFailed,
	// ReasonProbesSucceeded, ReasonTimedOut, ReasonAdopted, ReasonForced): the fleet counts
	// only the states a pod earned on its own calls (breakerconfig.Earned), and
	// shared-verdict stores do not publish back what they adopted.
	Reason string
	// Trigger says which judgement of calls opened the circuit, for Reason Tripped
	// (breakerconfig.TriggerFailureRate, TriggerSlowCallRate) and ProbeFailed
	// (TriggerFailedProbe, TriggerSlowProbe); Counts holds the figures (Failures or Slow
	// over Calls). Empty otherwise.
	Trigger string
	// ConsecutiveOpens and OpenTimeout describe the open period entered, for To Open (and
	// the one just ended, for To HalfOpen): as in breaker.Verdict.
	ConsecutiveOpens int
	OpenTimeout      time.Duration
	// Period is the state period entered. It grows by one on every transition of the
	// breaker; observers can use it to order deliveries made from different goroutines.
	Period uint64
}

// Observer sees every transition of the breakers it is given to. OnTransition runs
// synchronously on the goroutine that caused the transition, after the breaker's lock is
// released (so it may call the breaker), and must not block for long: hand slow work, such
// as a network write, to another goroutine. Deliveries from different goroutines may arrive
// out of order; [Transition.Period] orders them.
type Observer interface {
	OnTransition(Transition)
}

// CallObserver is an Observer that sees every call too, and every retry asked of a
// budgeted breaker. Breakers without one skip this bookkeeping entirely, so only those that
// want it pay per call. Its methods run as OnTransition does.
type CallObserver interface {
	Observer
	// OnCallStart: an admitted call starts in state s (one more active call).
	OnCallStart(breaker string, s circuit.State)
	// OnCallEnd: an admitted call ended (one fewer active call), or a call was refused
	// (Outcome OutcomeRejected, with no OnCallStart before it).
	OnCallEnd(CallEvent)
	// OnFallback: breaker.Call runs its Open callback for the call ev describes, ev.Err
	// being the cause handed to it: a refusal (Outcome OutcomeRejected; Initial says
	// whether the circuit was open or its half-open probes were all taken, and Err
	// whether the concurrency limit refused it instead), or a failure of the protected
	// callback.
	OnFallback(ev CallEvent)
	// OnRetry: a retry was allowed (and is then a call like any other), or the budget
	// refused it.
	OnRetry(breaker string, allowed bool)
}

// CallEvent describes one call as the breaker judged it.
type CallEvent struct {
	Breaker string
	Outcome Outcome
	Initial circuit.State // the state the call was admitted (or refused) in
	Final   circuit.State // the state after its outcome was recorded
	// Err is what the protected function returned (nil on success), or for a refused call
	// the refusal, which says why: it matches breaker.ErrOpen when the circuit refused it
	// (and breaker.ErrThrottled too when adaptive throttling did), and
	// breaker.ErrConcurrencyLimited, not ErrOpen, when the concurrency limit did (Initial
	// is then the state of the circuit that admitted it).
	Err error
	// Panic is the value the protected function panicked with; nil if it returned.
	Panic any
	// Slow says the call took at least SlowCallDuration (only judged when it is set; a
	// call the caller gave up on, context.Canceled, is never slow).
	Slow bool
}

// Outcome is what the breaker made of one call. Telemetry spells the outcomes "success",
// "failure", "ignored" and "rejected" (pkg/breaker/otelbreaker's circuit_breaker.outcome).
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
	// OutcomeRejected means the protected function never ran: the circuit
	// short-circuited the call, or throttling or the concurrency limit refused it
	// (CallEvent.Err says which).
	OutcomeRejected
)
