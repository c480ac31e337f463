package breakertest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
)

// The drivers put a breaker in a state through the causes that move it in production, not
// through a back door: a test that forces a state should leave the transition log, the
// observers and the telemetry as a real outage would, or it tests a breaker nobody runs.
// Each returns an error, rather than taking a testing.TB, so that it works in Examples and
// outside tests too; the errors for states out of reach wrap ErrUnreachable.

// ErrUnreachable is matched, with errors.Is, by the error a driver returns when the state
// asked for cannot be reached: a forced mode holds the circuit, the breaker is not on the
// Clock given, or its policy or classifier keeps the calls the driver makes from moving it.
var ErrUnreachable = errors.New("breakertest: state cannot be reached")

// ErrInjected is the failure the kit injects when a test does not name one: what
// [OpenByFailures] and a failing [Upstream] return given a nil error.
var ErrInjected = errors.New("breakertest: injected failure")

// maxDrivenCalls bounds the calls OpenByFailures makes: a policy that needs more is one a
// test should drive by other means.
const maxDrivenCalls = 1 << 20

func unreachable(b *breaker.Breaker, to breaker.State, format string, args ...any) error {
	return fmt.Errorf("%w: breaker %q to %v: %s", ErrUnreachable, b.Name(), to, fmt.Sprintf(format, args...))
}

// Open opens b by tripping it (breaker.Trip), as an operator or the application's own code
// would: the transition's reason is breakerconfig.ReasonManual. A circuit already open is left as it
// is, its open period running on. Under ModeForcedOpen the circuit is open already; under
// ModeForcedClosed it cannot open, and Open returns an error wrapping [ErrUnreachable].
func Open(b *breaker.Breaker) error {
	if b.State() == breaker.Open {
		return nil
	}
	if b.Policy().Mode == breaker.ModeForcedClosed {
		return unreachable(b, breaker.Open, "ModeForcedClosed holds the circuit closed")
	}
	b.Trip()
	if s := b.State(); s != breaker.Open {
		return unreachable(b, breaker.Open, "still %v after Trip", s)
	}
	return nil
}

// OpenByFailures opens b with failing calls through b.Execute, each returning err (nil:
// [ErrInjected]), as an outage would: the transition's reason is breakerconfig.ReasonTripped. Closed,
// it makes as many calls as the window needs to reach MinimumThroughput and FailureRatio,
// counting what the window already holds (Counts); half-open, one failed probe re-opens the
// circuit. A circuit already open is left as it is.
//
// It needs the breaker's classifier to count err as a failure, and a window that failures
// can tip: with FailureRatio 1 and successes in the window, no number of failures opens
// the circuit until the successes age out (advance the Clock by twice the Window first).
// Under ModeForcedClosed the circuit cannot open. In those cases, and when a probe slot is
// not free, it returns an error wrapping [ErrUnreachable].
func OpenByFailures(b *breaker.Breaker, err error) error {
	if err == nil {
		err = ErrInjected
	}
	fail := func(context.Context) error { return err }
	switch b.State() {
	case breaker.Open:
		return nil
	case breaker.HalfOpen:
		if e := b.Execute(context.Background(), fail); errors.Is(e, breaker.ErrOpen) {
			return unreachable(b, breaker.Open, "the probe was refused (%v): probes in flight hold every slot", e)
		}
		if s := b.State(); s != breaker.Open {
			return unreachable(b, breaker.Open, "still %v after a probe returned %q: does the classifier count it as a failure?", s, err)
		}
		return nil
	}
	p := b.Policy()
	if p.Mode == breaker.ModeForcedClosed {
		return unreachable(b, breaker.Open, "ModeForcedClosed holds the circuit closed")
	}
	n, why := failuresToOpen(b.Counts(), p)
	if why != "" {
		return unreachable(b, breaker.Open, "%s", why)
	}
	// One more than the arithmetic says, for a float ratio that lands a hair short.
	for i := 0; i <= n; i++ {
		before := b.Counts()
		if e := b.Execute(context.Background(), fail); errors.Is(e, breaker.ErrOpen) {
			return unreachable(b, breaker.Open, "a call was refused (%v)", e)
		}
		if b.State() == breaker.Open {
			return nil
		}
		if after := b.Counts(); after.Calls > before.Calls && after.Failures == before.Failures {
			return unreachable(b, breaker.Open, "the breaker's classifier does not count %q as a failure", err)
		}
	}
	c := b.Counts()
	return unreachable(b, breaker.Open, "still %v after %d failed calls (window: %d calls, %d failures)", b.State(), n+1, c.Calls, c.Failures)
}

// failuresToOpen is how many failed calls open a closed circuit whose window holds c, or
// why none will.
func failuresToOpen(c breaker.Counts, p breaker.Policy) (int, string) {
	calls, failures := float64(c.Calls), float64(c.Failures)
	n := max(1, float64(p.MinimumThroughput)-calls)
	short := p.FailureRatio*calls - failures // how far the failures fall short of the ratio
	if short > 0 {
		if p.FailureRatio >= 1 {
			return 0, fmt.Sprintf("FailureRatio is 1 and the window holds %d successes: no failure opens it until they age out (advance the Clock by twice the Window)", c.Calls-c.Failures)
		}
		n = max(n, math.Ceil(short/(1-p.FailureRatio)))
	}
	if n > maxDrivenCalls {
		return 0, fmt.Sprintf("it would take %.0f failed calls (window: %d calls, %d failures)", n, c.Calls, c.Failures)
	}
	return int(n), ""
}

// HalfOpen moves b to half-open the way time does: it opens a closed circuit with [Open]
// (Trip), then lets the open period pass, the transition's reason being
// breakerconfig.ReasonTimedOut. A circuit already half-open is left as it is.
//
// With clock, the Clock b was built on (breaker.WithClock), it advances clock by what is
// left of the open period (Breaker.RetryAfter), so no time passes for real. With clock nil,
// for a breaker on real time, it sleeps that long (keep OpenTimeout short in such tests),
// and a little more: a breaker without a Clock reads a coarse clock that may lag by about a
// millisecond. It returns an error wrapping [ErrUnreachable] under ModeForcedOpen, whose
// open period never ends, under ModeForcedClosed, and when b does not go half-open once the
// open period has passed on clock (b is not on that clock).
func HalfOpen(b *breaker.Breaker, clock *Clock) error {
	switch b.State() {
	case breaker.HalfOpen:
		return nil
	case breaker.Closed:
		if err := Open(b); err != nil {
			return unreachable(b, breaker.HalfOpen, "it must open first: %v", err)
		}
	}
	left, ok := b.RetryAfter()
	if !ok {
		if b.Policy().Mode == breaker.ModeForcedOpen {
			return unreachable(b, breaker.HalfOpen, "ModeForcedOpen holds the circuit open")
		}
		// The open period ended between State and RetryAfter.
		left = 0
	}
	if clock != nil {
		clock.Advance(left)
		if s := b.State(); s != breaker.HalfOpen {
			return unreachable(b, breaker.HalfOpen, "still %v after the Clock advanced %v past the open period: is the breaker on this Clock (breaker.WithClock)?", s, left)
		}
		return nil
	}
	time.Sleep(left)
	for deadline := time.Now().Add(time.Second); ; {
		s := b.State()
		if s == breaker.HalfOpen {
			return nil
		}
		if time.Now().After(deadline) {
			return unreachable(b, breaker.HalfOpen, "still %v a second after its open period of %v ended: is it on a fake Clock? Pass that Clock", s, left)
		}
		time.Sleep(time.Millisecond)
	}
}

// Closed moves b to closed the way recovery does: an open circuit goes half-open by
// [HalfOpen] (on clock, or in real time with clock nil), and a half-open one closes after
// SuccessThreshold successful probes through b.Execute, the transition's reason being
// breakerconfig.ReasonProbesSucceeded. A closed circuit is left as it is, window and all.
//
// The probes need free slots: with probes of the test's own in flight, up to
// HalfOpenPermittedCalls, they are refused. They take no time on a Clock, and next to none
// in real time, so a SlowCallDuration does not count them slow unless it is shorter than a
// function call. Under ModeForcedOpen the circuit cannot close. In those cases it returns
// an error wrapping [ErrUnreachable].
func Closed(b *breaker.Breaker, clock *Clock) error {
	switch b.State() {
	case breaker.Closed:
		return nil
	case breaker.Open:
		if err := HalfOpen(b, clock); err != nil {
			return unreachable(b, breaker.Closed, "it must go half-open first: %v", err)
		}
	}
	succeed := func(context.Context) error { return nil }
	for i := 0; i < b.Policy().SuccessThreshold; i++ {
		if err := b.Execute(context.Background(), succeed); err != nil {
			return unreachable(b, breaker.Closed, "probe %d of %d was refused: %v", i+1, b.Policy().SuccessThreshold, err)
		}
		if s := b.State(); s != breaker.HalfOpen {
			if s == breaker.Closed {
				return nil
			}
			return unreachable(b, breaker.Closed, "%v after probe %d of %d succeeded: was it slow (SlowCallDuration)?", s, i+1, b.Policy().SuccessThreshold)
		}
	}
	if s := b.State(); s != breaker.Closed {
		return unreachable(b, breaker.Closed, "still %v after %d successful probes", s, b.Policy().SuccessThreshold)
	}
	return nil
}
