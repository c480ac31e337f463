// Package access hands the packages of the breaker module that build on a Breaker
// (package registry's Groups) what they need of one that its exported API does not
// offer: the call path's clock and published state, read without the breaker's lock.
// Package breaker fills in Breaker when it is initialised; the API stays as small as its
// users need, and nothing outside the module can import this package.
package access

import (
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker/internal/circuit"
)

// Of is what a package of the module may read of a breaker B, its policy P and its
// options O. It is generic so that package breaker, which this package cannot import,
// gives it its own types, and users get them back typed (see Breaker).
type Of[B, P, O any] struct {
	// Mono reads b's monotonic timeline as its call path does: the coarse clock, or its
	// injected Clock. Cheap enough for every call.
	Mono func(b *B) int64
	// Wall reads the wall clock b reads (its injected Clock, or time.Now).
	Wall func(b *B) time.Time
	// Published is b's state as the call path last saw it published: without b's lock,
	// and without the moves time alone makes (open to half-open), which would deliver
	// transitions.
	Published func(b *B) circuit.State
	// Clock returns the wall clock opts set (WithClock), or time.Now.
	Clock func(opts []O) func() time.Time
	// WithDefaults returns p with every zero field set to the default, as a breaker
	// running p reports it; the copy shares nothing with p.
	WithDefaults func(p P) P
}

// Breaker is the *Of[breaker.Breaker, breaker.Policy, breaker.Option] package breaker
// sets in its init; a user asserts it to that type once.
var Breaker any
