// Package observe is the vocabulary of what a breaker tells the code watching it: every
// change of state (Transition, delivered to an Observer), and, to a CallObserver or a
// RetryObserver, every call and retry with what the breaker made of it (Outcome,
// RejectReason, FallbackReason). Give an observer to a breaker with breaker.WithObserver;
// the adapters (otelbreaker, slogbreaker, kube, redisstore) are observers.
//
// A breaker delivers to observers with no lock held, on the goroutine that caused what
// they see; a breaker without a CallObserver or RetryObserver pays nothing per call for
// the feature.
package observe
