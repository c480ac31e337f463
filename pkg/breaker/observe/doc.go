// Package observe is what a breaker tells the code watching it: every change of state (a
// Transition, delivered to an Observer), and, to a CallObserver, every call with what the
// breaker made of it (a CallEvent), every fallback and every retry. Give an observer to a
// breaker with breaker.WithObserver; the adapters (otelbreaker, slogbreaker, kube,
// redisstore) are observers.
//
// A transition's reason and trigger are spelled as a pod's report spells them
// (pkg/breaker/breakerconfig), so there is one word for each however a transition is
// reported. A breaker delivers to observers with no lock held, on the goroutine that caused
// what they see; a breaker without a CallObserver pays nothing per call for the feature.
package observe
