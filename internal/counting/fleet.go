package counting

import (
	"cmp"
	"slices"
	"time"

	"k8s.io/utils/ptr"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// MaxClockSkew is how far ahead of the operator's clock a report's times may run: the
// documented skew between a node's clock and the operator's (docs/design.md §5.12).
const MaxClockSkew = 2 * time.Second

// Attested is the time a claimed since counts as: the claim, but at most the skew after
// the operator first saw it. A pod cannot date a state in the future, past the first time
// it could have been read, and so pin the fleet to it. A zero firstSeen bounds nothing.
func Attested(since, firstSeen time.Time) time.Time {
	if firstSeen.IsZero() {
		return since
	}
	if limit := firstSeen.Add(MaxClockSkew); since.After(limit) {
		return limit
	}
	return since
}

// FleetDecision is what the pods of a breaker with scope Fleet decided between them
// (docs/design.md §5.12). It is a function of their entries alone: the operator keeps no
// memory of earlier decisions, so a restarted operator decides the same.
type FleetDecision struct {
	// Verdict is what the rendered config carries for the pods to adopt; nil for none.
	Verdict *breakerconfig.Verdict
	// Open: the fleet is open.
	Open bool
	// Earned is how many pods hold an earned Open that counts, Need how many open the
	// fleet: the quorum of the reporting pods, and at least one.
	Earned, Need int64
	// openers are the entries whose earned Opens count, the most recent first.
	openers []*Entry
}

// DecideFleet applies the fleet rule to the entries of a breaker's running pods, their
// times attested by the operator:
//
//   - Only earned states count: an Open a pod reached by its calls, Trip or a failed probe;
//     a Closed it reached by probes. A breaker just created, a verdict adopted, a timeout
//     and a forced mode move nothing; nor does a breaker Group's entry, whose keys share no
//     verdict (docs/groups.md). A state reached before the CircuitBreaker existed is about
//     another breaker of that name, and counts for nothing either.
//   - The fleet opens once earned Opens reach the quorum. Its open period starts when the
//     most recent quorum of them was complete: going through the entries from the most
//     recent earned Open back, the openSince of the one whose pods complete the quorum.
//     (An entry dates its pods' Opens by its earliest; for a pod's own report, the one.)
//   - The open period (docs/design.md §5.13) is the spec's: openTimeout, backed off up to
//     maxOpenTimeout by the consecutive opens the entry that started it counted, a count
//     clamped to what the backoff can reach (SpecOpenPeriod). What a report says the
//     period lasts is not read: no report can hold the fleet longer than the spec does.
//   - The first earned Closed after that start closes it, if it is dated no earlier than
//     the open period could have ended (its start + its length − the skew): before that no
//     pod's probe can have run, and one pod's claim must not outvote the pods that hold
//     the fleet open. The Closed verdict is published while some pod is still not closed,
//     so that every pod's open period ends with it.
func DecideFleet(cb *resiliencev1alpha1.CircuitBreaker, entries []Entry) FleetDecision {
	quorum := int64(ptr.Deref(cb.Spec.FleetQuorumPercent, resiliencev1alpha1.DefaultFleetQuorumPercent))
	var pods, closed int64
	for i := range entries {
		pods += entries[i].Pods
		closed += entries[i].Closed
	}
	d := FleetDecision{Need: max(1, (quorum*pods+99)/100)}
	// creationTimestamp keeps whole seconds: a state reached in the second the breaker was
	// created, just before it, still counts.
	created := cb.CreationTimestamp.Time
	var closedAt time.Time
	closers := false
	for i := range entries {
		e := &entries[i]
		if e.Keys != nil {
			continue
		}
		if e.EarnedOpen > 0 && !e.OpenSince.IsZero() && !e.OpenSince.Before(created) {
			d.openers = append(d.openers, e)
			d.Earned += e.EarnedOpen
		}
		if e.EarnedClosed > 0 && !e.ClosedSince.IsZero() && !e.ClosedSince.Before(created) {
			closers = true
		}
	}
	slices.SortFunc(d.openers, func(a, b *Entry) int {
		return cmp.Or(b.OpenSince.Compare(a.OpenSince), cmp.Compare(a.Node, b.Node), cmp.Compare(a.Pod, b.Pod))
	})
	var started *Entry
	var earliest time.Time
	if d.Earned >= d.Need {
		var sum int64
		for _, e := range d.openers {
			if sum += e.EarnedOpen; sum >= d.Need {
				started = e
				break
			}
		}
		_, period := SpecOpenPeriod(cb, started.ConsecutiveOpens)
		// A Closed at the start itself is no later than it: a tie goes to open.
		earliest = latest(started.OpenSince.Add(time.Nanosecond), started.OpenSince.Add(period-MaxClockSkew))
	}
	if closers {
		for i := range entries {
			e := &entries[i]
			if e.Keys == nil && e.EarnedClosed > 0 && !e.ClosedSince.Before(created) && !e.ClosedSince.Before(earliest) && e.ClosedSince.After(closedAt) {
				closedAt = e.ClosedSince
			}
		}
	}
	if started != nil && closedAt.IsZero() {
		d.Open = true
		d.Verdict = &breakerconfig.Verdict{State: breakerconfig.StateOpen, Since: started.OpenSince.UTC()}
		setOpenPeriod(d.Verdict, cb, started)
		return d
	}
	if !closedAt.IsZero() && closed < pods {
		d.Verdict = &breakerconfig.Verdict{State: breakerconfig.StateClosed, Since: closedAt.UTC()}
	}
	return d
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// setOpenPeriod gives an Open verdict the open period the spec gives the entry that
// started it (SpecOpenPeriod). An entry that carries no period (an agent or pod that
// predates backoff) gives none, and the pods keep their own policy's, which is the spec's.
//
// The count the verdict carries is the entry's, at least 1 and at most MaxCountedOpens:
// it is what the pods count on from and what the status shows, and a fleet's count goes
// on past the point where its period stops growing (each re-open is news), but it
// lengthens no period past what the spec's backoff reaches.
func setOpenPeriod(v *breakerconfig.Verdict, cb *resiliencev1alpha1.CircuitBreaker, e *Entry) {
	if e.ConsecutiveOpens <= 0 && e.OpenTimeout == 0 {
		return
	}
	_, period := SpecOpenPeriod(cb, e.ConsecutiveOpens)
	v.ConsecutiveOpens, v.OpenTimeout = int(min(max(e.ConsecutiveOpens, 1), MaxCountedOpens)), breakerconfig.Duration(period)
}

// MaxCountedOpens is the most consecutive opens a verdict or a status says: a thousand
// re-opens without a close is an outage of days even at a 1-minute maximum.
const MaxCountedOpens = 1000

// SpecOpenPeriod is the k-th consecutive open period cb's spec allows (docs/design.md
// §5.13): min(openTimeout × 2^(k-1), maxOpenTimeout), or openTimeout without
// maxOpenTimeout. A report's count is only a count: clamped to at least 1 and to the first
// k whose period reaches maxOpenTimeout (1 without backoff), it is returned with its
// period.
func SpecOpenPeriod(cb *resiliencev1alpha1.CircuitBreaker, consecutiveOpens int32) (int32, time.Duration) {
	base := durationOr(cb.Spec.OpenTimeout, resiliencev1alpha1.DefaultOpenTimeout)
	if base <= 0 {
		// A spec render refuses; the pods keep their last good config, with its period.
		base = resiliencev1alpha1.DefaultOpenTimeout
	}
	ceiling := base
	if m := cb.Spec.MaxOpenTimeout; m != nil && m.Duration > base {
		ceiling = m.Duration
	}
	period, k := base, int32(1)
	for k < consecutiveOpens && period < ceiling {
		// period < ceiling ≤ MaxInt64: doubling past it is clamped, not overflowed.
		period = min(ceiling, period+min(period, ceiling-period))
		k++
	}
	return k, period
}
