package fakeclock

import (
	"sync"
	"time"
)

// Clock is a breaker.Clock with a Monotonic reading that moves only when told to. It reads two
// clocks: the wall clock (Now) and a monotonic one (Monotonic), which a breaker
// measures its durations on. Advance moves both, as time passing does;
// StepWall moves the wall clock alone, as a correction by NTP or a VM resumed
// does. It is safe for concurrent use.
type Clock struct {
	mu   sync.Mutex
	now  time.Time     // guarded by mu
	mono time.Duration // guarded by mu
}

// NewClock returns a Clock reading start, its monotonic reading at 0.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the wall clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Monotonic returns the monotonic clock's reading: the sum of every Advance.
func (c *Clock) Monotonic() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mono
}

// Advance lets d pass: both clocks move forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mono += d
	c.mu.Unlock()
}

// StepWall sets the wall clock d later (earlier, if d is negative) without any time
// passing: the monotonic clock stays where it is.
func (c *Clock) StepWall(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
