// Package httpbreaker puts a [breaker.Breaker] in front of HTTP calls: a client-side
// [Transport] that short-circuits requests to a failing dependency without sending them, and
// a server-side [Handler] that sheds load with 503 and Retry-After while its circuit is open.
//
// What counts as a failure follows HTTP's own division of blame: a 5xx answer, a timeout or
// a transport error says the dependency is unwell; a 4xx answer proves it is up and
// answering (the caller asked for something wrong), so it is a success; a request the caller
// cancelled says nothing either way. Both wrappers take a classifier to change that.
package httpbreaker
