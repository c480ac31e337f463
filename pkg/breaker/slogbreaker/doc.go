// Package slogbreaker writes a structured log record, with log/slog, for every transition
// of a circuit breaker: when it happened, which breaker, from and to which state, why, the
// failure rate and the calls behind it, and the error that tipped it.
package slogbreaker
