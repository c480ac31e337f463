// Package otelbreaker records the telemetry of circuit breakers with OpenTelemetry metrics.
//
// An [Observer] is given to breakers with [breaker.WithObserver] and records the
// instruments of utopia-php/circuit-breaker, the PHP library whose semantics Fusebox
// follows, named breaker.* or, with [WithPrefix], prefix.breaker.*:
//
//	breaker.calls              counter  circuit_breaker.outcome, .initial_state, .state (final)
//	breaker.active_calls       gauge    calls admitted and not yet finished, circuit_breaker.state (admitted in)
//	breaker.state              gauge    0 closed, 1 open, 2 half-open
//	breaker.failures           gauge    Counts().Failures of tracked breakers
//	breaker.successes          gauge    Counts().Successes of tracked breakers
//	breaker.callback_failures  counter  exception.type (the error's Go type), circuit_breaker.state
//	breaker.fallbacks          counter  circuit_breaker.reason: open, half_open_saturated, failure, concurrency_limited
//	breaker.transitions        counter  circuit_breaker.from_state, .to_state, .cause
//	breaker.retries            counter  retries asked of the retry budget, circuit_breaker.outcome: allowed, refused
//	breaker.throttled          counter  calls adaptive throttling rejected (also in breaker.calls as rejected)
//	breaker.concurrency_limited counter calls the concurrency limit refused (also in breaker.calls as rejected)
//	breaker.concurrency_limit  gauge    the limit on calls in flight in force, of tracked breakers with one
//	breaker.event.timestamp    gauge    Unix seconds of the last transition or probe (circuit_breaker.event)
//
// Every measurement carries circuit_breaker.name. breaker.active_calls is split by the state
// a call was admitted in, read after any open → half-open move its admission made: closed,
// half_open for probes, open for the calls ModeMetricsOnly runs although Enforce would have
// refused them. breaker.transitions also carries
// circuit_breaker.cause, which tells a verdict adopted from another process ("adopted") from
// one reached locally. The per-call counters are kept in the observer's own atomic cells
// and reported, with attribute sets built once per breaker, when metrics are collected, as
// the gauges are: a call costs a few atomic additions and allocates nothing. Breakers
// without the observer pay nothing. The failures, successes and concurrency_limit gauges
// report the breakers passed to [Observer.Track] or [Observer.TrackRegistry].
package otelbreaker
