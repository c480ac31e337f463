package otelbreaker

import (
	"errors"
	"reflect"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/observe"
)

// series is everything recorded for one breaker, with every attribute set it needs built
// once, so that recording allocates nothing.
type series struct {
	// stateAt packs the last known state with the transition period it was reached in
	// (period<<2 | state), so a transition delivered late cannot overwrite a newer one.
	stateAt atomic.Uint64
	// group: the series of a breaker Group's members, labelled with the Group's name. Its
	// counters sum over the keys; it has no state (each key has its own, and the Group's
	// is its Summary).
	group bool
	// started counts admitted calls by the state they were admitted in; those in flight
	// are started minus the admitted calls ended in the same initial state, which the calls
	// cells count already, so ending a call costs one addition.
	started [3]atomic.Int64

	calls     [4][3][3]cell // outcome, initial, final
	fallbacks [4]cell
	slow      [3]cell  // by the state the call ran in
	failures  sync.Map // failKey → *cell, by error type
	retries   [2]cell  // refused, allowed (OnRetry)
	throttled cell     // calls adaptive throttling rejected
	limited   cell     // calls the concurrency limit refused

	base        metric.ObserveOption
	active      [3]metric.ObserveOption     // by the state a call was admitted in
	transitions [3][3][5][]metric.AddOption // from, to, cause
	transEvent  [3][3][]metric.RecordOption
	probeEvent  [4][]metric.RecordOption // outcome
	name        attribute.KeyValue
}

// cell is one counter series: its count and its attributes.
type cell struct {
	n   atomic.Int64
	opt metric.ObserveOption
}

func (c *cell) observe(obs metric.Observer, inst metric.Int64Observable) {
	// A series is reported from its first count on: breakers see few of the 36
	// outcome and state combinations, and the others would be noise.
	if n := c.n.Load(); n != 0 {
		obs.ObserveInt64(inst, n, c.opt)
	}
}

// inFlight returns the calls admitted in state st and not yet ended. The ends are read
// first: every call counted as ended had started by then, so the difference is never
// negative.
func (s *series) inFlight(st int) int64 {
	var ended int64
	for i, oc := range outcomes {
		if oc == observe.OutcomeRejected {
			continue
		}
		for k := range s.calls[i][st] {
			ended += s.calls[i][st][k].n.Load()
		}
	}
	return s.started[st].Load() - ended
}

type failKey struct {
	t        reflect.Type
	state    breaker.State
	panicked bool
}

var (
	states   = [3]breaker.State{breaker.Closed, breaker.Open, breaker.HalfOpen}
	outcomes = [4]observe.Outcome{observe.OutcomeSuccess, observe.OutcomeFailure, observe.OutcomeIgnored, observe.OutcomeRejected}
	// outcomeNames spell circuit_breaker.outcome, by observe.Outcome.
	outcomeNames = [4]string{"success", "failure", "ignored", "rejected"}
	// reasons spell breaker.fallbacks' circuit_breaker.reason (fallbackOf).
	reasons = [4]string{"open", "half_open_saturated", "failure", "concurrency_limited"}
	// causes spell breaker.transitions' circuit_breaker.cause (causeOf): what moved the
	// state, the breaker's own judgement of calls being "calls".
	causes = [5]string{"calls", "timeout", "trip", "mode", "adopted"}
)

// causeOf is the index in causes of a transition's reason, and false for a reason this
// package does not know (one a newer breaker package might add).
func causeOf(reason string) (int, bool) {
	switch reason {
	case breakerconfig.ReasonTripped, breakerconfig.ReasonProbeFailed, breakerconfig.ReasonProbesSucceeded:
		return 0, true
	case breakerconfig.ReasonTimedOut:
		return 1, true
	case breakerconfig.ReasonManual:
		return 2, true
	case breakerconfig.ReasonForced:
		return 3, true
	case breakerconfig.ReasonAdopted:
		return 4, true
	}
	return 0, false
}

// triggerOf spells a transition's trigger as circuit_breaker.trigger does, "" for none.
func triggerOf(trigger string) string {
	switch trigger {
	case breakerconfig.TriggerFailureRate:
		return "failure_rate"
	case breakerconfig.TriggerSlowCallRate:
		return "slow_call_rate"
	case breakerconfig.TriggerFailedProbe:
		return "failed_probe"
	case breakerconfig.TriggerSlowProbe:
		return "slow_probe"
	}
	return ""
}

// fallbackOf is the index in reasons of the fallback ev describes: a refusal of an open
// circuit, of a half-open one whose probes were all taken, of the concurrency limit, or a
// failure.
func fallbackOf(ev observe.CallEvent) int {
	switch {
	case ev.Outcome != observe.OutcomeRejected:
		return 2
	case errors.Is(ev.Err, breaker.ErrConcurrencyLimited):
		return 3
	case ev.Initial == breaker.HalfOpen:
		return 1
	}
	return 0
}

func observeOpt(kv ...attribute.KeyValue) metric.ObserveOption {
	return metric.WithAttributeSet(attribute.NewSet(kv...))
}

func addOpt(kv ...attribute.KeyValue) []metric.AddOption {
	return []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(kv...))}
}

func recordOpt(kv ...attribute.KeyValue) []metric.RecordOption {
	return []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(kv...))}
}

func newSeries(name string) *series {
	n := KeyName.String(name)
	s := &series{name: n, base: metric.WithAttributeSet(attribute.NewSet(n))}
	for i, oc := range outcomeNames {
		for j, in := range states {
			for k, fin := range states {
				s.calls[i][j][k].opt = observeOpt(n, KeyOutcome.String(oc),
					KeyInitialState.String(in.String()), KeyState.String(fin.String()))
			}
		}
		s.probeEvent[i] = recordOpt(n, KeyEvent.String("probe"), KeyOutcome.String(oc))
	}
	for i, r := range reasons {
		s.fallbacks[i].opt = observeOpt(n, KeyReason.String(r))
	}
	s.retries[0].opt = observeOpt(n, KeyOutcome.String("refused"))
	s.retries[1].opt = observeOpt(n, KeyOutcome.String("allowed"))
	s.throttled.opt = s.base
	s.limited.opt = s.base
	for i, st := range states {
		s.slow[i].opt = observeOpt(n, KeyState.String(st.String()))
		s.active[i] = observeOpt(n, KeyState.String(st.String()))
	}
	for i, from := range states {
		for j, to := range states {
			for k, c := range causes {
				s.transitions[i][j][k] = addOpt(n, KeyFromState.String(from.String()),
					KeyToState.String(to.String()), KeyCause.String(c))
			}
			s.transEvent[i][j] = recordOpt(n, KeyEvent.String("transition"),
				KeyFromState.String(from.String()), KeyToState.String(to.String()))
		}
	}
	return s
}
