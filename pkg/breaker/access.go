package breaker

import (
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker/internal/access"
	"github.com/fusebox-dev/fusebox/pkg/breaker/internal/circuit"
)

// What package registry reads of a breaker that the exported API does not offer
// (internal/access says why).
func init() {
	access.Breaker = &access.Of[Breaker, Policy, Option]{
		Mono:         (*Breaker).now,
		Wall:         func(b *Breaker) time.Time { return time.Unix(0, b.exactInstant().wall) },
		Published:    func(b *Breaker) circuit.State { return b.cur.Load().state },
		Clock:        clockOf,
		WithDefaults: Policy.withDefaults,
	}
}

// clockOf returns the wall clock opts set, or time.Now.
func clockOf(opts []Option) func() time.Time {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.clock != nil {
		return o.clock.Now
	}
	return time.Now
}
