package breaker

import (
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// Verdict is what processes share about a breaker: its state and when that was reached,
// never its counters (§5.10). Not even the half-open probe successes: each process needs
// SuccessThreshold successes of its own, and the first to get them closes the circuit for
// all with a Closed verdict.
type Verdict struct {
	State State
	Since time.Time // when State was reached; for Open, the start of the open period
	// ConsecutiveOpens is how many open periods in a row, counting the current one, the
	// circuit has had without closing in between: the k of §5.13's backoff. 0 when closed.
	ConsecutiveOpens int
	// OpenTimeout is the length of the open period, for an Open verdict: OpenTimeout, or
	// with Policy.MaxOpenTimeout set, the backed-off period of the k-th open. A process that
	// adopts the verdict keeps this period, so a fleet backs off as one. 0 otherwise, and in
	// a verdict from a writer that does not know the field.
	OpenTimeout time.Duration
}

// Verdict returns the breaker's state and when it was reached, first applying the moves
// time alone makes (open → half-open, and half-open → open over leaked probes), as State
// does.
func (b *Breaker) Verdict() Verdict {
	var pend pending
	b.mu.Lock()
	b.advance(b.now(), &pend)
	v := Verdict{State: b.state, Since: time.Unix(0, b.since), ConsecutiveOpens: b.opens}
	if b.state == Open {
		v.OpenTimeout = b.openFor
	}
	b.mu.Unlock()
	b.deliver(&pend)
	return v
}

// Adopt applies a verdict reached elsewhere (another process, the fleet), keeping the
// window's tallies, and reports whether the state changed:
//
//   - Open: the circuit is open, its open period starting at v.Since, from any state; if it
//     is already open, v.Since replaces the local start (and the state does not change). Its
//     open period is the verdict's (v.ConsecutiveOpens and v.OpenTimeout, when set; else
//     the next under the local policy), so processes that share a verdict back off as one
//     (§5.13), but never longer than the local policy allows: v.OpenTimeout counts as at
//     most MaxOpenTimeout (OpenTimeout without backoff), the bound that also caps every
//     later period counted on from v.ConsecutiveOpens. It goes half-open by itself that
//     long after v.Since, with its own local probe cap.
//   - HalfOpen: from Open only, moves to half-open, where it probes with its own cap and
//     counts its own probe successes from zero.
//   - Closed: from Open or HalfOpen, closes, clearing the window, unless v.Since is
//     earlier than the start of the local open period (a verdict about an older outage).
//     A circuit that went half-open by its own timeout after the verdict was reached
//     still closes: the verdict concluded this open period.
//
// An Open or HalfOpen verdict from before the local state was reached (v.Since earlier
// than the local transition) is stale and ignored, so a late or repeated delivery cannot
// undo a newer local decision: a circuit that went half-open or closed by itself is not
// sent back to an open period that already ended. Under ModeForcedOpen or ModeForcedClosed the mode wins and
// Adopt does nothing. An identical verdict is a no-op. A transition Adopt causes is
// delivered to observers with Reason breakerconfig.ReasonAdopted, so that stores do not echo it back. A zero
// v.Since means now, and so does a v.Since later than this process's now (§5.12): a clock
// that runs ahead elsewhere must not hold this circuit open past OpenTimeout. Such a
// verdict never re-times an open period already running, or every repeated delivery would
// restart it.
func (b *Breaker) Adopt(v Verdict) bool {
	var pend pending
	b.mu.Lock()
	changed := b.adopt(v, &pend)
	b.mu.Unlock()
	b.deliver(&pend)
	return changed
}

func (b *Breaker) adopt(v Verdict, pend *pending) bool {
	if m := b.policy.Mode; m == ModeForcedOpen || m == ModeForcedClosed {
		return false
	}
	// A verdict from elsewhere holds this circuit open no longer than its own policy
	// would (§5.12): whatever a fleet's or another process's verdict says, its open period
	// is clamped to the longest this policy allows. Its count of consecutive opens is kept
	// (a fleet backs off as one, and the period already bounds what it can do), short of
	// a count that would overflow.
	v.OpenTimeout = min(v.OpenTimeout, b.policy.longestOpen())
	v.ConsecutiveOpens = min(v.ConsecutiveOpens, maxAdoptedOpens)
	now := b.now()
	// The verdict's Since is wall-clock time; the open period it starts is timed on the
	// monotonic timeline, placed as long before now as the wall clock says it was.
	since := b.exactInstant()
	future := false
	if !v.Since.IsZero() {
		if w := v.Since.UnixNano(); w <= since.Wall {
			since = since.Back(w)
		} else {
			future = true
		}
	}
	stale := b.changed && since.Wall < b.since
	switch v.State {
	case Open:
		if b.state == Open {
			retime := !future && since.Wall != b.since
			if retime {
				b.since, b.sinceMono, b.openedAt = since.Wall, since.Mono, since.Wall
			}
			// The verdict's open period is the one every process keeps (§5.13).
			if v.ConsecutiveOpens > 0 && v.ConsecutiveOpens != b.opens {
				b.opens, retime = v.ConsecutiveOpens, true
			}
			if v.OpenTimeout > 0 && v.OpenTimeout != b.openFor {
				b.openFor, retime = v.OpenTimeout, true
			}
			if retime {
				b.publish()
			}
			return false
		}
		if stale {
			return false
		}
		b.transition(move{to: Open, reason: breakerconfig.ReasonAdopted, counts: b.counts(now), at: since, opens: v.ConsecutiveOpens, openFor: v.OpenTimeout}, now, pend)
	case HalfOpen:
		if b.state != Open || stale {
			return false
		}
		b.transition(move{to: HalfOpen, reason: breakerconfig.ReasonAdopted, counts: b.openTally, at: since}, now, pend)
	case Closed:
		// A closed verdict ends every open period that started before it. It is
		// judged against when this circuit opened, not when it went half-open:
		// a pod whose own timeout moved it to half-open after the fleet closed
		// would otherwise wait for traffic to learn what the fleet knows.
		if b.state == Closed || b.changed && since.Wall < b.openedAt {
			return false
		}
		b.transition(move{to: Closed, reason: breakerconfig.ReasonAdopted, counts: b.counts(now), at: since}, now, pend)
	default:
		return false
	}
	return true
}
