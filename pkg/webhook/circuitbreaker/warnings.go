package circuitbreaker

import (
	"fmt"
	"strings"
	"time"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// LowMinimumThroughput is the minimumThroughput under which a breaker is
// warned to open on thin evidence.
const LowMinimumThroughput = 5

// Bounds of a slowCallDuration that is legal but likely a mistake.
const (
	// ShortSlowCallDuration: a pause of the caller's own process (the
	// scheduler, a garbage collection) reaches it, so healthy calls count slow.
	ShortSlowCallDuration = 5 * time.Millisecond
	// LongSlowCallDuration: most clients give up before it, and a call cut
	// short by its timeout is a failure, not a slow call.
	LongSlowCallDuration = 30 * time.Second
)

// Warnings returns what is legal but risky about cb, one message per finding,
// in a fixed order:
//
//   - minimumThroughput under LowMinimumThroughput: the circuit opens on the
//     evidence of a handful of calls;
//   - openTimeout shorter than window: the circuit rests less than it takes to
//     measure a failure rate;
//   - halfOpenPermittedCalls above minimumThroughput: a half-open circuit sends
//     more probes at once than a closed one needs to judge;
//   - mode ForcedOpen or ForcedClosed without the annotations
//     resiliencev1alpha1.AnnotationForcedBy and AnnotationForcedReason;
//   - slowCallDuration under ShortSlowCallDuration or over LongSlowCallDuration;
//   - slowCallRatePercent other than its default with no slowCallDuration,
//     where it judges nothing;
//   - maxOpenTimeout equal to openTimeout, which backs off nothing;
//   - a candidate that changes nothing of the policy, or one under mode ForcedOpen,
//     which runs no call for it to judge;
//   - spec.concurrency.maxInFlight below the pods status.memberCounts.reporting counts,
//     or maxWait longer than window (concurrencyWarnings).
//
// Unset fields count with their defaults.
func Warnings(cb *resiliencev1alpha1.CircuitBreaker) []string {
	return warnings(cb, reportingPods(cb))
}

// warnings is Warnings with the reporting pods counted by the caller: on an update, the
// stored object's status, since the status of the object an update sends is not what the
// operator wrote.
func warnings(cb *resiliencev1alpha1.CircuitBreaker, reporting int32) []string {
	s := effective(cb.Spec)
	var w []string
	if n := *s.MinimumThroughput; n < LowMinimumThroughput {
		w = append(w, fmt.Sprintf("spec.minimumThroughput is %d: the failure rate is judged on as few as %d %s, so %s can open the circuit; %d or more is recommended",
			n, n, plural(int(n), "call", "calls"), failuresToOpen(n, *s.FailureRatePercent), LowMinimumThroughput))
	}
	if s.OpenTimeout.Duration < s.Window.Duration {
		w = append(w, fmt.Sprintf("spec.openTimeout (%s) is shorter than spec.window (%s): the circuit rests for less time than it takes to measure a failure rate, so a struggling dependency gets little relief between probes",
			s.OpenTimeout.Duration, s.Window.Duration))
	}
	if *s.HalfOpenPermittedCalls > *s.MinimumThroughput {
		w = append(w, fmt.Sprintf("spec.halfOpenPermittedCalls (%d) is above spec.minimumThroughput (%d): a half-open circuit lets more probe calls at a time reach a dependency that just failed than a closed circuit needs to judge it",
			*s.HalfOpenPermittedCalls, *s.MinimumThroughput))
	}
	if s.Mode == resiliencev1alpha1.ModeForcedOpen || s.Mode == resiliencev1alpha1.ModeForcedClosed {
		var missing []string
		for _, a := range []string{resiliencev1alpha1.AnnotationForcedBy, resiliencev1alpha1.AnnotationForcedReason} {
			if strings.TrimSpace(cb.Annotations[a]) == "" {
				missing = append(missing, a)
			}
		}
		if len(missing) > 0 {
			w = append(w, fmt.Sprintf("spec.mode is %s but the %s %s %s not set: record who forced the circuit and why, so that it is not left %s after the incident",
				s.Mode, plural(len(missing), "annotation", "annotations"), strings.Join(missing, " and "), plural(len(missing), "is", "are"), heldState(s.Mode)))
		}
	}
	w = append(w, timingWarnings(s)...)
	w = append(w, candidateWarnings(cb, s)...)
	return append(w, concurrencyWarnings(s, reporting)...)
}

// timingWarnings are Warnings' findings about slow calls and backoff (docs/design.md §5.13).
func timingWarnings(s resiliencev1alpha1.CircuitBreakerSpec) []string {
	var w []string
	switch slow := s.SlowCallDuration; {
	case slow == nil:
		if p := *s.SlowCallRatePercent; p != resiliencev1alpha1.DefaultSlowCallRatePercent {
			w = append(w, fmt.Sprintf("spec.slowCallRatePercent (%d) has no effect without spec.slowCallDuration: no call is judged slow until spec.slowCallDuration says how long a slow call takes", p))
		}
	case slow.Duration < ShortSlowCallDuration:
		w = append(w, fmt.Sprintf("spec.slowCallDuration (%s) is under %s: a scheduling delay or a garbage-collection pause in the calling pod alone takes that long, so healthy calls can count as slow and open the circuit",
			slow.Duration, ShortSlowCallDuration))
	case slow.Duration > LongSlowCallDuration:
		w = append(w, fmt.Sprintf("spec.slowCallDuration (%s) is over %s: most clients time out before that, and a call cut short by its timeout counts as a failure, not as slow; set it below the callers' timeout",
			slow.Duration, LongSlowCallDuration))
	}
	if m := s.MaxOpenTimeout; m != nil && m.Duration == s.OpenTimeout.Duration {
		w = append(w, fmt.Sprintf("spec.maxOpenTimeout (%s) equals spec.openTimeout: open periods are not backed off; set it higher to back off a dependency that stays down, or leave it unset",
			m.Duration))
	}
	return w
}

// failuresToOpen says how few failures can open a circuit whose window holds
// exactly minimumThroughput calls: ceil(minimumThroughput × rate), at least 1.
func failuresToOpen(minimumThroughput, ratePercent int32) string {
	n := (minimumThroughput*ratePercent + 99) / 100
	if n <= 1 {
		return "a single failure"
	}
	return fmt.Sprintf("%d failures", n)
}

func heldState(m resiliencev1alpha1.Mode) string {
	if m == resiliencev1alpha1.ModeForcedOpen {
		return "open"
	}
	return "closed"
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
