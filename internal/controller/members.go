package controller

import (
	"fmt"
	"slices"
	"strings"
	"time"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// severity orders member states for the breaker's overall state: one open pod
// makes the breaker Open.
func severity(s resiliencev1alpha1.State) int {
	switch s {
	case resiliencev1alpha1.StateOpen:
		return 2
	case resiliencev1alpha1.StateHalfOpen:
		return 1
	default:
		return 0
	}
}

// aggregate computes the breaker's state and member counts from its members.
// The state is the most severe member state, or with scope Fleet the fleet
// verdict while there is one; it is empty when no pod reports.
func aggregate(cb *resiliencev1alpha1.CircuitBreaker) (resiliencev1alpha1.State, *resiliencev1alpha1.MemberCounts) {
	members := cb.Status.Members
	if len(members) == 0 {
		return "", nil
	}
	counts := &resiliencev1alpha1.MemberCounts{Reporting: int32(len(members))}
	state := resiliencev1alpha1.StateClosed
	for _, m := range members {
		switch m.State {
		case resiliencev1alpha1.StateOpen:
			counts.Open++
		case resiliencev1alpha1.StateHalfOpen:
			counts.HalfOpen++
		default:
			counts.Closed++
		}
		if onLatestConfig(cb, m) {
			counts.OnLatestConfig++
		}
		if severity(m.State) > severity(state) {
			state = m.State
		}
	}
	if cb.Spec.Scope == resiliencev1alpha1.ScopeFleet {
		if v := fleetVerdict(members); v != nil {
			state = resiliencev1alpha1.State(v.State)
		}
	}
	return state, counts
}

func onLatestConfig(cb *resiliencev1alpha1.CircuitBreaker, m resiliencev1alpha1.MemberStatus) bool {
	return m.ConfigGeneration == cb.Generation && m.ConfigError == ""
}

// fleetVerdict is the shared verdict of a breaker with scope Fleet: the most
// recent Open or Closed report of any member. A member that opens opens the
// fleet; a member that closes after its probes succeed closes it; a failed
// probe re-opens it with a new time. Half-open is not shared: every pod probes
// on its own, after its own open timeout, as in a single process. There is no
// verdict when every member is closed (nothing to share) or none has decided.
func fleetVerdict(members []resiliencev1alpha1.MemberStatus) *breakerconfig.Verdict {
	var latest *resiliencev1alpha1.MemberStatus
	settled := true
	for i := range members {
		m := &members[i]
		if m.State != resiliencev1alpha1.StateClosed {
			settled = false
		}
		if m.State == resiliencev1alpha1.StateHalfOpen {
			continue
		}
		// On a tie an Open report wins: opening is the safe side.
		if latest == nil || m.Since.After(latest.Since.Time) ||
			m.Since.Equal(&latest.Since) && m.State == resiliencev1alpha1.StateOpen {
			latest = m
		}
	}
	if latest == nil || settled {
		return nil
	}
	return &breakerconfig.Verdict{State: string(latest.State), Since: latest.Since.UTC()}
}

// opener is the open member whose report opened the breaker most recently, for
// the CircuitOpened Event. Pods that adopted a fleet verdict report the same
// time without evidence of their own, so among equals the one with evidence,
// the pod that actually opened, is named.
func opener(members []resiliencev1alpha1.MemberStatus) *resiliencev1alpha1.MemberStatus {
	var latest *resiliencev1alpha1.MemberStatus
	for i := range members {
		m := &members[i]
		if m.State != resiliencev1alpha1.StateOpen {
			continue
		}
		if latest == nil || m.Since.After(latest.Since.Time) ||
			m.Since.Equal(&latest.Since) && latest.Calls == nil && m.Calls != nil {
			latest = m
		}
	}
	return latest
}

// openedMessage describes who opened the breaker and on what evidence.
func openedMessage(cb *resiliencev1alpha1.CircuitBreaker) string {
	m := opener(cb.Status.Members)
	if m == nil {
		return "The fleet verdict is Open"
	}
	var evidence string
	if m.FailureRatePercent != nil && m.Calls != nil {
		evidence = fmt.Sprintf(": %d%% of %d calls failed", *m.FailureRatePercent, *m.Calls)
	}
	return fmt.Sprintf("Pod %s opened the circuit at %s%s", m.Pod, m.Since.UTC().Format(time.RFC3339), evidence)
}

// rejections lists the members that refused the published configuration, as
// "pod: reason", sorted by pod.
func rejections(members []resiliencev1alpha1.MemberStatus) []string {
	var out []string
	for _, m := range members {
		if m.ConfigError != "" {
			out = append(out, m.Pod+": "+m.ConfigError)
		}
	}
	slices.Sort(out)
	return out
}

// maxListed is how many pods a condition message names before "and N more".
const maxListed = 5

func joinLimited(items []string, limit int) string {
	if len(items) <= limit {
		return strings.Join(items, "; ")
	}
	return strings.Join(items[:limit], "; ") + fmt.Sprintf("; and %d more", len(items)-limit)
}
