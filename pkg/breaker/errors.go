package breaker

import (
	"errors"
	"strconv"
)

// ErrOpen is matched, with errors.Is, by every error of a short-circuited call; the error
// says which breaker refused and why.
var ErrOpen = errors.New("breaker: circuit open")

// rejectReason says why a call was short-circuited.
type rejectReason uint8

const (
	rejectNone              rejectReason = iota
	rejectOpen                           // the circuit is open
	rejectHalfOpenSaturated              // half-open, and the probe cap is reached
	rejectForcedOpen                     // the mode is ForcedOpen
	rejectThrottled                      // closed, and adaptive throttling rejected the call (§5.16)
	rejectLimited                        // the circuit admitted the call and the concurrency limit refused it (§5.18)
)

// openError is the error of a short-circuited call. A breaker builds one per reason up
// front, so that refusing a call allocates nothing.
type openError struct {
	breaker string
	reason  rejectReason
}

func (e *openError) Error() string {
	switch e.reason {
	case rejectHalfOpenSaturated:
		return "breaker " + quote(e.breaker) + ": circuit half-open, probe limit reached"
	case rejectForcedOpen:
		return "breaker " + quote(e.breaker) + ": circuit forced open"
	case rejectThrottled:
		return "breaker " + quote(e.breaker) + ": call throttled (circuit closed)"
	}
	return "breaker " + quote(e.breaker) + ": circuit open"
}

// Is makes errors.Is(err, ErrOpen) hold for every openError, and errors.Is(err,
// ErrThrottled) for one adaptive throttling rejected.
func (e *openError) Is(target error) bool {
	return target == ErrOpen || target == ErrThrottled && e.reason == rejectThrottled
}

// panicError is the failure recorded, and reported to observers (observe.CallEvent.Panic
// holds the value), for a protected function that panicked. The panic itself is re-raised,
// so callers never receive it as an error.
type panicError struct{ value any }

func (e *panicError) Error() string { return "breaker: protected function panicked" }

func quote(s string) string { return strconv.Quote(s) }

var (
	_ error = (*openError)(nil)
	_ error = (*panicError)(nil)
	_ error = (*fieldError)(nil)
	_ error = (*retryBudgetError)(nil)
)
