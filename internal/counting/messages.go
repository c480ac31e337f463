package counting

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// The sentences of a CircuitBreaker's Open condition and of its Events: who opened it, on
// what evidence, and why it is not closed.

// OpenedMessage describes who opened the breaker, on what evidence, and for how long when
// the open period is backed off.
func (v View) OpenedMessage(cb *resiliencev1alpha1.CircuitBreaker) string {
	if d := v.Fleet; d != nil {
		if v.Forced {
			return fmt.Sprintf("Held open by mode %s on %d of %d pods", resiliencev1alpha1.ModeForcedOpen, v.Counts.Open, v.Counts.Reporting)
		}
		if !d.Open {
			return v.fleetProgress(cb)
		}
		start := d.openers[0].OpenSince
		var named []string
		var counted int64
		for _, e := range d.openers {
			if counted >= d.Need {
				break
			}
			start = e.OpenSince
			counted += e.EarnedOpen
			var shown int64
			for k := range e.Notable {
				m := &e.Notable[k]
				if m.Circuit.State == resiliencev1alpha1.StateOpen && m.Earned() && shown < e.EarnedOpen {
					named = append(named, Text(m.Pod, MaxNameText)+evidence(cb, m))
					shown++
				}
			}
			if rest := e.EarnedOpen - shown; rest > 0 {
				named = append(named, fmt.Sprintf("%d more pods of %s", rest, e.source()))
			}
		}
		return fmt.Sprintf("The fleet is open since %s: %d of %d pods opened on their own evidence (quorum %s): %s",
			start.UTC().Format(time.RFC3339), d.Earned, v.Counts.Reporting, quorumText(cb), JoinLimited(named)) +
			openPeriod(v.ConsecutiveOpens, v.OpenTimeout)
	}
	m := v.opener
	if m == nil {
		return "The circuit is open"
	}
	var period *metav1.Duration
	if m.Circuit.OpenTimeout != nil {
		period = m.Circuit.OpenTimeout
	}
	return fmt.Sprintf("Pod %s opened the circuit at %s (%s)%s", Text(m.Pod, MaxNameText), m.Since.UTC().Format(time.RFC3339), m.Reason, evidence(cb, m)) +
		openPeriod(m.Circuit.ConsecutiveOpens, period)
}

// HalfOpenedMessage says why the breaker is half-open, for its CircuitHalfOpened Event.
func (v View) HalfOpenedMessage(cb *resiliencev1alpha1.CircuitBreaker) string {
	if m := v.FleetHalfOpen(cb); m != "" {
		return m
	}
	return fmt.Sprintf("%d of %d pods are probing whether the dependency is back", v.Counts.HalfOpen, v.Counts.Reporting)
}

// FleetHalfOpen says why a Fleet breaker that is not open is not closed either, when it is
// not that its pods are probing: pods open on their own evidence that do not make the
// quorum yet, or pods that have not yet followed the probes that closed the fleet. "0 of
// 10 pods are probing", or a quorum count that is met, would mislead in both cases. ""
// otherwise.
func (v View) FleetHalfOpen(cb *resiliencev1alpha1.CircuitBreaker) string {
	d := v.Fleet
	switch {
	case d == nil || d.Open:
		return ""
	case d.Earned > 0 && d.Earned < d.Need:
		return v.fleetProgress(cb)
	case d.Verdict != nil && d.Verdict.State == breakerconfig.StateClosed:
		return fmt.Sprintf("A pod's probes closed the fleet at %s; the other pods follow", d.Verdict.Since.UTC().Format(time.RFC3339))
	}
	return ""
}

// fleetProgress says how close a Fleet breaker that is not open is to its quorum.
func (v View) fleetProgress(cb *resiliencev1alpha1.CircuitBreaker) string {
	return fmt.Sprintf("%d of %d pods open on their own evidence, quorum %s needs %d",
		v.Fleet.Earned, v.Counts.Reporting, quorumText(cb), v.Fleet.Need)
}

// OddShapeMessage says which carriers were left out for reporting the breaker in the other
// shape, for the ConfigApplied condition and its Event.
func (v View) OddShapeMessage() string {
	kept, shape := "plain breaker", "breaker Group (keys)"
	if v.Keys != nil {
		kept, shape = shape, kept
	}
	return fmt.Sprintf("%d carriers report this breaker as a %s while %d pods report it as a %s; one breaker has one shape, so theirs are left out: %s",
		len(v.OddShape), shape, v.Counts.Reporting, kept, JoinLimited(v.OddShape))
}

// quorumText is spec.fleetQuorumPercent as kubectl fusebox spells it: "1 pod" for 0, the
// one pod that opens the fleet, rather than a "0%" that reads as no pod at all.
func quorumText(cb *resiliencev1alpha1.CircuitBreaker) string {
	q := ptr.Deref(cb.Spec.FleetQuorumPercent, resiliencev1alpha1.DefaultFleetQuorumPercent)
	if q == 0 {
		return "1 pod"
	}
	return fmt.Sprintf("%d%%", q)
}

// evidence says what in the pod's calls opened its circuit: the failure rate or the
// slow-call rate of its window with the figures, or the probe that failed or was slow.
func evidence(cb *resiliencev1alpha1.CircuitBreaker, m *Member) string {
	c := m.Circuit
	switch c.Trigger {
	case breakerconfig.TriggerSlowCallRate:
		if c.SlowCallRatePercent != nil && c.Calls != nil {
			return fmt.Sprintf(": slow-call rate %d%% of %d calls (%s)", *c.SlowCallRatePercent, *c.Calls, slowCalls(cb))
		}
		return ": slow-call rate (" + slowCalls(cb) + ")"
	case breakerconfig.TriggerFailedProbe:
		return ": a probe failed"
	case breakerconfig.TriggerSlowProbe:
		return ": a probe was slow (" + slowCalls(cb) + ")"
	}
	if c.FailureRatePercent == nil || c.Calls == nil {
		return ""
	}
	return fmt.Sprintf(": %d%% of %d calls failed", *c.FailureRatePercent, *c.Calls)
}

// slowCalls says what a slow call is under cb's current spec.
func slowCalls(cb *resiliencev1alpha1.CircuitBreaker) string {
	if d := cb.Spec.SlowCallDuration; d != nil {
		return "slow: " + d.Duration.String() + " or longer"
	}
	return "slow calls"
}

// openPeriod says how long a backed-off open period lasts (docs/design.md §5.13), and
// nothing for a first open, whose period is openTimeout.
func openPeriod(consecutiveOpens int32, openTimeout *metav1.Duration) string {
	if consecutiveOpens < 2 || openTimeout == nil {
		return ""
	}
	return fmt.Sprintf(". Open for %s, the %s consecutive open", openTimeout.Duration, ordinal(consecutiveOpens))
}

// ordinal spells n as "1st", "2nd", "3rd", "11th", ...
func ordinal(n int32) string {
	suffix := "th"
	switch {
	case n%100 >= 11 && n%100 <= 13:
	case n%10 == 1:
		suffix = "st"
	case n%10 == 2:
		suffix = "nd"
	case n%10 == 3:
		suffix = "rd"
	}
	return fmt.Sprintf("%d%s", n, suffix)
}

// maxListed is how many items a condition message or Event names before "and N more".
const maxListed = 5

// JoinLimited joins items, naming at most maxListed of them.
func JoinLimited(items []string) string {
	if len(items) <= maxListed {
		return strings.Join(items, "; ")
	}
	return strings.Join(items[:maxListed], "; ") + fmt.Sprintf("; and %d more", len(items)-maxListed)
}
