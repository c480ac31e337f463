// Package breakertest helps test code that uses pkg/breaker: a clock that
// moves only when told to, so a test can make an open timeout or a window
// pass without sleeping.
package breakertest

import (
	"sync"
	"time"
)

// Clock is a breaker.Clock that moves only when Advance is called. It is safe
// for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time // guarded by mu
}

// NewClock returns a Clock reading start.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
