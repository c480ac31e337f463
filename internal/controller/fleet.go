package controller

import (
	"cmp"
	"slices"
	"time"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// fleetDecision is what the pods of a breaker with scope Fleet decided between them
// (docs/design.md §5.12). It is a function of their reports alone: the operator keeps no memory
// of earlier decisions, so a restarted operator decides the same.
type fleetDecision struct {
	// verdict is what the rendered config carries for the pods to adopt; nil for none.
	verdict *breakerconfig.Verdict
	// open: the fleet is open.
	open bool
	// openers are the pods whose earned Opens count, most recent first.
	openers []member
	// need is how many earned Opens open the fleet: the quorum of the reporting pods, and
	// at least one.
	need int
}

// decideFleet applies the fleet rule to the reports of a breaker's running pods, their
// times attested by the operator (member.since):
//
//   - Only earned states count: an Open a pod reached by its calls, Trip or a failed probe;
//     a Closed it reached by probes. A breaker just created, a verdict adopted, a timeout
//     and a forced mode move nothing. A state reached before the CircuitBreaker existed
//     is about another breaker of that name, and counts for nothing either.
//   - The fleet opens once earned Opens reach the quorum. Its open period starts when the
//     most recent quorum of them was complete: the need-th most recent Open.
//   - The open period (docs/design.md §5.13) is the spec's: openTimeout, backed off up to
//     maxOpenTimeout by the consecutive opens the Open that started it counted, a count
//     clamped to what the backoff can reach (specOpenPeriod). What the report says the period
//     lasts is not read: one pod's report cannot hold the fleet longer than the spec does.
//   - The first earned Closed after that start closes it, if it is dated no earlier than
//     the open period could have ended (its start + its length − the skew): before that no
//     pod's probe can have run, and one pod's claim must not outvote the pods that hold
//     the fleet open. The Closed verdict is published while some pod is still not closed,
//     so that every pod's open period ends with it. A pod refuses a Closed verdict older
//     than its own open period.
//
// It is a function of the reports and of when the operator first saw them alone: the
// operator keeps no memory of earlier decisions.
func decideFleet(cb *resiliencev1alpha1.CircuitBreaker, members []member) fleetDecision {
	quorum := int(int32Or(cb.Spec.FleetQuorumPercent, resiliencev1alpha1.DefaultFleetQuorumPercent))
	d := fleetDecision{need: max(1, (quorum*len(members)+99)/100)}
	// creationTimestamp keeps whole seconds: a state reached in the second the breaker was
	// created, just before it, still counts. Telling those apart would need the pods to
	// say which CircuitBreaker (UID) each state was reached under.
	created := cb.CreationTimestamp.Time
	var closers []member
	// The openers are sorted as pointers and copied once: sorting the members themselves
	// moved each one's whole entry on every swap, the most of a fleet reconcile's time
	// once the reports were no longer listed.
	var openers []*member
	settled := true
	for i := range members {
		m := &members[i]
		if m.entry.State != resiliencev1alpha1.StateClosed {
			settled = false
		}
		if !breakerconfig.Earned(string(m.entry.State), m.entry.Reason) || m.since.Before(created) {
			continue
		}
		if m.entry.Keys != nil {
			// A breaker Group's entry sums its keys' breakers; no key's verdict is
			// shared across the fleet (docs/groups.md), so it moves no fleet verdict.
			continue
		}
		switch m.entry.State {
		case resiliencev1alpha1.StateOpen:
			openers = append(openers, m)
		case resiliencev1alpha1.StateClosed:
			closers = append(closers, *m)
		}
	}
	slices.SortFunc(openers, func(a, b *member) int {
		return cmp.Or(b.since.Compare(a.since), cmp.Compare(a.pod, b.pod))
	})
	if len(openers) > 0 {
		d.openers = make([]member, len(openers))
		for i, m := range openers {
			d.openers[i] = *m
		}
	}
	// earliest is the first time an earned Closed counts from; zero when the fleet is not
	// open and any does.
	var earliest time.Time
	var started *member
	if len(d.openers) >= d.need {
		started = &d.openers[d.need-1]
		_, period := specOpenPeriod(cb, started.entry.ConsecutiveOpens)
		// A Closed at the start itself is no later than it: a tie goes to open.
		earliest = latest(started.since.Add(time.Nanosecond), started.since.Add(period-maxClockSkew))
	}
	var closedAt time.Time
	for _, m := range closers {
		if !m.since.Before(earliest) && m.since.After(closedAt) {
			closedAt = m.since
		}
	}
	if started != nil && closedAt.IsZero() {
		d.open = true
		d.verdict = &breakerconfig.Verdict{State: breakerconfig.StateOpen, Since: started.since.UTC()}
		setOpenPeriod(d.verdict, cb, started.entry)
		return d
	}
	if !closedAt.IsZero() && !settled {
		d.verdict = &breakerconfig.Verdict{State: breakerconfig.StateClosed, Since: closedAt.UTC()}
	}
	return d
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// setOpenPeriod gives an Open verdict the open period the spec gives the report that
// started it (specOpenPeriod). A report that carries no period (an agent that predates
// backoff) gives none, and the pods keep their own policy's, which is the spec's.
//
// The count the verdict carries is the pod's, at least 1 and at most maxCountedOpens:
// it is what the pods count on from and what the status shows, and a fleet's count
// goes on past the point where its period stops growing (each re-open is news), but it
// lengthens no period past what the spec's backoff reaches.
func setOpenPeriod(v *breakerconfig.Verdict, cb *resiliencev1alpha1.CircuitBreaker, e resiliencev1alpha1.BreakerReportEntry) {
	if e.ConsecutiveOpens <= 0 && e.OpenTimeout == nil {
		return
	}
	_, period := specOpenPeriod(cb, e.ConsecutiveOpens)
	v.ConsecutiveOpens, v.OpenTimeout = int(min(max(e.ConsecutiveOpens, 1), maxCountedOpens)), breakerconfig.Duration(period)
}

// maxCountedOpens is the most consecutive opens a verdict or a status says: a
// thousand re-opens without a close is an outage of days even at a 1-minute maximum.
const maxCountedOpens = 1000

// specOpenPeriod is the k-th consecutive open period cb's spec allows (docs/design.md §5.13):
// min(openTimeout × 2^(k-1), maxOpenTimeout), or openTimeout without maxOpenTimeout. A
// pod's count is only a count: clamped to at least 1 and to the first k whose period
// reaches maxOpenTimeout (1 without backoff), it is returned with its period.
func specOpenPeriod(cb *resiliencev1alpha1.CircuitBreaker, consecutiveOpens int32) (int32, time.Duration) {
	base, err := durationOr(cb.Spec.OpenTimeout, resiliencev1alpha1.DefaultOpenTimeout)
	if err != nil || base <= 0 {
		// A spec render refuses; the pods keep their last good config, with its period.
		base, _ = time.ParseDuration(resiliencev1alpha1.DefaultOpenTimeout)
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
