package otelbreaker

import (
	"reflect"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
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
	fallbacks [3]cell
	slow      [3]cell  // by the state the call ran in
	failures  sync.Map // failKey → *cell, by error type
	retries   [2]cell  // refused, allowed (OnRetry)
	throttled cell     // calls adaptive throttling rejected

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
	reasons  = [3]observe.FallbackReason{observe.FallbackOpen, observe.FallbackHalfOpenSaturated, observe.FallbackFailure}
	causes   = [5]observe.TransitionCause{observe.CauseCalls, observe.CauseTimeout, observe.CauseTrip, observe.CauseMode, observe.CauseAdopted}
)

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
	for i, oc := range outcomes {
		for j, in := range states {
			for k, fin := range states {
				s.calls[i][j][k].opt = observeOpt(n, KeyOutcome.String(oc.String()),
					KeyInitialState.String(in.String()), KeyState.String(fin.String()))
			}
		}
		s.probeEvent[i] = recordOpt(n, KeyEvent.String("probe"), KeyOutcome.String(oc.String()))
	}
	for i, r := range reasons {
		s.fallbacks[i].opt = observeOpt(n, KeyReason.String(r.String()))
	}
	s.retries[0].opt = observeOpt(n, KeyOutcome.String("refused"))
	s.retries[1].opt = observeOpt(n, KeyOutcome.String("allowed"))
	s.throttled.opt = s.base
	for i, st := range states {
		s.slow[i].opt = observeOpt(n, KeyState.String(st.String()))
		s.active[i] = observeOpt(n, KeyState.String(st.String()))
	}
	for i, from := range states {
		for j, to := range states {
			for k, c := range causes {
				s.transitions[i][j][k] = addOpt(n, KeyFromState.String(from.String()),
					KeyToState.String(to.String()), KeyCause.String(c.String()))
			}
			s.transEvent[i][j] = recordOpt(n, KeyEvent.String("transition"),
				KeyFromState.String(from.String()), KeyToState.String(to.String()))
		}
	}
	return s
}
