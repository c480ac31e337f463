package breakertest

import (
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/internal/fakeclock"
)

// A breaker measures durations on the Monotonic readings of a Clock that has them
// (breaker.WithClock).
var _ interface {
	breaker.Clock
	Monotonic() time.Duration
} = (*Clock)(nil)

// Clock is a breaker.Clock that moves only when told to. It reads two clocks: the
// wall clock (Now) and a monotonic one (Monotonic), which a breaker measures its durations
// on. Advance moves both, as time passing does; StepWall moves the wall clock alone, as a
// correction by NTP or a VM resumed does. It is safe for concurrent use.
type Clock struct {
	// The clock lives in an internal package that the core's own tests share: they
	// cannot import this package, which imports the core.
	c *fakeclock.Clock
}

// NewClock returns a Clock reading start, its monotonic reading at 0.
func NewClock(start time.Time) *Clock { return &Clock{c: fakeclock.NewClock(start)} }

// Now returns the wall clock's time.
func (c *Clock) Now() time.Time { return c.c.Now() }

// Monotonic returns the monotonic clock's reading: the sum of every Advance.
func (c *Clock) Monotonic() time.Duration { return c.c.Monotonic() }

// Advance lets d pass: both clocks move forward by d.
func (c *Clock) Advance(d time.Duration) { c.c.Advance(d) }

// StepWall sets the wall clock d later (earlier, if d is negative) without any time
// passing: the monotonic clock stays where it is.
func (c *Clock) StepWall(d time.Duration) { c.c.StepWall(d) }
