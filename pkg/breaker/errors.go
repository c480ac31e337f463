package breaker

import (
	"errors"
	"strconv"

	"github.com/fusebox-dev/fusebox/pkg/breaker/observe"
)

// ErrOpen is matched, with errors.Is, by every error of a short-circuited call. The error
// itself is an [*OpenError] that says which breaker refused and why.
var ErrOpen = errors.New("breaker: circuit open")

// OpenError is the error of a short-circuited call. A breaker builds one per reason up
// front, so that refusing a call allocates nothing; treat it as read-only.
type OpenError struct {
	Breaker string
	Reason  observe.RejectReason
}

func (e *OpenError) Error() string {
	switch e.Reason {
	case observe.RejectHalfOpenSaturated:
		return "breaker " + quote(e.Breaker) + ": circuit half-open, probe limit reached"
	case observe.RejectForcedOpen:
		return "breaker " + quote(e.Breaker) + ": circuit forced open"
	case observe.RejectThrottled:
		return "breaker " + quote(e.Breaker) + ": call throttled (circuit closed)"
	}
	return "breaker " + quote(e.Breaker) + ": circuit open"
}

// Is makes errors.Is(err, ErrOpen) hold for every OpenError, and errors.Is(err,
// ErrThrottled) for one adaptive throttling rejected.
func (e *OpenError) Is(target error) bool {
	return target == ErrOpen || target == ErrThrottled && e.Reason == observe.RejectThrottled
}

func quote(s string) string { return strconv.Quote(s) }

var (
	_ error = (*OpenError)(nil)
	_ error = (*PanicError)(nil)
	_ error = (*fieldError)(nil)
)
