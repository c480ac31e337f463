package controller

import (
	"cmp"
	"slices"
	"time"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// fleetDecision is what the pods of a breaker with scope Fleet decided between them
// (DESIGN §5.12). It is a function of their reports alone: the operator keeps no memory
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

// decideFleet applies the fleet rule to the reports of a breaker's running pods:
//
//   - Only earned states count: an Open a pod reached by its calls, Trip or a failed probe;
//     a Closed it reached by probes. A breaker just created, a verdict adopted, a timeout
//     and a forced mode move nothing. A state reached before the CircuitBreaker existed
//     is about another breaker of that name, and counts for nothing either.
//   - The fleet opens once earned Opens reach the quorum. Its open period starts when the
//     most recent quorum of them was complete: the need-th most recent Open.
//   - The open period (DESIGN §5.13) is the one of the Open that started it: the pod that
//     opened counted its consecutive opens, the fleet's verdicts it adopted among them, and
//     backed its period off, so the fleet's k-th consecutive open lasts what §5.13 says.
//   - The first earned Closed after that start closes it; the Closed verdict is published
//     while some pod is still not closed, so that every pod's open period ends with it.
//     A pod refuses a Closed verdict older than its own open period.
func decideFleet(cb *resiliencev1alpha1.CircuitBreaker, members []member) fleetDecision {
	quorum := int(int32Or(cb.Spec.FleetQuorumPercent, resiliencev1alpha1.DefaultFleetQuorumPercent))
	d := fleetDecision{need: max(1, (quorum*len(members)+99)/100)}
	// creationTimestamp keeps whole seconds: a state reached in the second the breaker was
	// created, just before it, still counts. Telling those apart would need the pods to
	// say which CircuitBreaker (UID) each state was reached under.
	created := cb.CreationTimestamp.Time
	var closedAt time.Time
	settled := true
	for _, m := range members {
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
			d.openers = append(d.openers, m)
		case resiliencev1alpha1.StateClosed:
			if m.since.After(closedAt) {
				closedAt = m.since
			}
		}
	}
	slices.SortFunc(d.openers, func(a, b member) int {
		return cmp.Or(b.since.Compare(a.since), cmp.Compare(a.pod, b.pod))
	})
	if len(d.openers) >= d.need {
		started := d.openers[d.need-1]
		if !closedAt.After(started.since) {
			d.open = true
			d.verdict = &breakerconfig.Verdict{State: breakerconfig.StateOpen, Since: started.since.UTC()}
			setOpenPeriod(d.verdict, started.entry)
			return d
		}
	}
	if !closedAt.IsZero() && !settled {
		d.verdict = &breakerconfig.Verdict{State: breakerconfig.StateClosed, Since: closedAt.UTC()}
	}
	return d
}

// setOpenPeriod gives an Open verdict the open period of the report that started it. A
// report that does not carry one (an agent that predates backoff) gives none, and the pods
// then keep their own policy's.
func setOpenPeriod(v *breakerconfig.Verdict, e resiliencev1alpha1.BreakerReportEntry) {
	if e.ConsecutiveOpens > 0 {
		v.ConsecutiveOpens = int(e.ConsecutiveOpens)
	}
	if e.OpenTimeout != nil && e.OpenTimeout.Duration > 0 {
		v.OpenTimeout = breakerconfig.Duration(e.OpenTimeout.Duration)
	}
}
