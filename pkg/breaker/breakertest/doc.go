// Package breakertest is a kit for testing code that uses pkg/breaker: it puts a breaker
// in the state a test needs, plays the dependency behind it, and checks what the breaker
// did, on a clock the test moves by hand.
//
//   - [Clock] is a clock that moves only when told to. Given to a breaker with
//     breaker.WithClock, it lets a test make an open timeout or a window pass at once, and
//     step the wall clock alone, as NTP would.
//   - [Open], [OpenByFailures], [HalfOpen] and [Closed] drive a breaker to a state in one
//     call, through the causes that move it in production (Trip, failing calls, the open
//     timeout passing on the Clock, probe successes), so that observers and the transition
//     log see what they would see in production. They return an error wrapping
//     [ErrUnreachable] when a forced mode or the breaker's configuration keeps the state
//     out of reach.
//   - [Upstream] is a dependency that fails, answers HTTP status codes or slows down on
//     command and counts its calls. Its Call method is what Breaker.Execute runs, and it is
//     an http.Handler for httptest.NewServer, behind httpbreaker's Transport or Handler.
//     On a Clock its slowness is time the Clock advances; without one, it sleeps.
//   - [Recorder] is an observer that keeps every transition, for assertions on the
//     sequence ([Recorder.AssertStates], with a readable diff) and for waiting on a
//     transition made by another goroutine ([Recorder.Wait]).
//
// The kit uses only pkg/breaker's public API and the standard library, so what works here
// works on any breaker an application builds.
package breakertest
