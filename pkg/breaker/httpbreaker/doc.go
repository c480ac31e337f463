// Package httpbreaker puts a [breaker.Breaker] in front of HTTP calls: a client-side
// [Transport] that short-circuits requests to a failing dependency without sending them, and
// a server-side [Handler] that sheds load with 503 and Retry-After while its circuit is open.
//
// What counts as a failure follows HTTP's own division of blame: a 5xx answer, a timeout or
// a transport error says the dependency is unwell; a 4xx answer proves it is up and
// answering (the caller asked for something wrong), so it is a success; a request the caller
// cancelled says nothing either way. Both wrappers take a classifier to change that.
//
// Both guard every request with one breaker by default. Given a [registry.Group] instead,
// they keep one breaker per key, so that one failing host or route opens its own circuit
// and not everybody's: per host for a client ([ByHost], the Transport's default), per
// ServeMux route pattern for a server ([ByPattern], the Handler's default, or
// [ByMuxPattern] in front of a mux), or per any key a func(*http.Request) string picks.
//
// The Transport can also retry idempotent requests, opt-in with [Retry]: each retry is drawn
// from the breaker's retry budget (breaker.RetryBudget), honours Retry-After, and is never
// made while the circuit is open.
package httpbreaker
