package gate

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// Phase is the gate's verdict on a revision.
type Phase string

const (
	// PhaseSuccessful says the revision's circuit is closed and it made enough calls to
	// say so, or its baseline is the one failing.
	PhaseSuccessful Phase = "Successful"
	// PhaseFailed says the revision's circuit is open while its baseline's is not: its
	// pods fail where the baseline's do not.
	PhaseFailed Phase = "Failed"
	// PhaseInconclusive says the breakers cannot tell: both revisions are open (the
	// dependency fails for everyone), the revision is too quiet, it has no reporting
	// pods or nothing to be compared with, or the breaker is forced.
	PhaseInconclusive Phase = "Inconclusive"
)

// Judgement is the gate's answer, and the body of its endpoint's reply.
type Judgement struct {
	// Phase is the verdict.
	Phase Phase `json:"phase"`
	// Reason says why, in a sentence a person reads in a rollout's events.
	Reason string `json:"reason"`
	// Revision is the judged revision's line of status.revisions; only its name when
	// none of its pods reports.
	Revision resiliencev1alpha1.RevisionStatus `json:"revision"`
	// Baseline is the line it was compared with; nil when there was none.
	Baseline *resiliencev1alpha1.RevisionStatus `json:"baseline,omitempty"`
}

// Judge judges revision against baseline ("" for the revision with the most reporting
// pods other than revision) by cb's spec and status.revisions (docs/design.md §10):
//
//   - Inconclusive while the breaker is forced (spec.mode or an override in force):
//     its circuits say nothing of any revision;
//   - Inconclusive when no pod of revision reports the breaker, or a baseline named
//     has none;
//   - Inconclusive when both are open: the dependency fails for everyone, which is not
//     the new revision's doing (nor is it when there is no baseline to compare with);
//   - Failed when revision is open and the baseline is not;
//   - Inconclusive when revision made fewer than minimumThroughput calls over its pods'
//     windows: too quiet to judge;
//   - Successful otherwise.
//
// A revision is open when its verdict (RevisionStatus.State) is Open, or when the pods
// holding an Open they earned reach fleetQuorumPercent of its pods (at least one). An
// error means the question is malformed; it names the parameter.
func Judge(cb *resiliencev1alpha1.CircuitBreaker, revision, baseline string) (Judgement, error) {
	if err := checkRevision("revision", revision); err != nil {
		return Judgement{}, err
	}
	if baseline != "" {
		if err := checkRevision("baseline", baseline); err != nil {
			return Judgement{}, err
		}
		if baseline == revision {
			return Judgement{}, fmt.Errorf("baseline %q is the revision judged: name another one, or none for the revision with the most pods", baseline)
		}
	}
	j := Judgement{Revision: resiliencev1alpha1.RevisionStatus{Revision: revision}}
	r, ok := find(cb.Status.Revisions, revision)
	if ok {
		j.Revision = r
	}
	var b resiliencev1alpha1.RevisionStatus
	haveBaseline := false
	if baseline != "" {
		if b, haveBaseline = find(cb.Status.Revisions, baseline); !haveBaseline {
			b = resiliencev1alpha1.RevisionStatus{Revision: baseline}
		}
		j.Baseline = &b
	} else if b, haveBaseline = largestOther(cb.Status.Revisions, revision); haveBaseline {
		j.Baseline = &b
	}

	if why := forced(cb); why != "" {
		return j.with(PhaseInconclusive, "%s: its circuits say nothing of any revision", why), nil
	}
	if !ok || r.Pods == 0 {
		return j.with(PhaseInconclusive, "no running pod of revision %s reports breaker %s (status.revisions lists the %d revisions with the most reporting pods)",
			revision, cb.Name, resiliencev1alpha1.MaxRevisionsListed), nil
	}
	if baseline != "" && b.Pods == 0 {
		return j.with(PhaseInconclusive, "no running pod of baseline %s reports breaker %s: there is nothing to compare revision %s with",
			baseline, cb.Name, revision), nil
	}
	quorum := quorumOf(cb)
	rOpen, bOpen := isOpen(r, quorum), haveBaseline && isOpen(b, quorum)
	switch {
	case rOpen && !haveBaseline:
		return j.with(PhaseInconclusive, "revision %s is open (%s) and no other revision reports breaker %s: nothing tells its fault from the dependency's",
			revision, openers(r), cb.Name), nil
	case rOpen && bOpen:
		return j.with(PhaseInconclusive, "revision %s and baseline %s are both open (%s; %s): the dependency fails for every revision, which is not the new one's doing",
			revision, b.Revision, openers(r), openers(b)), nil
	case rOpen:
		return j.with(PhaseFailed, "revision %s is open (%s) while baseline %s is %s (%s)",
			revision, openers(r), b.Revision, stateWord(b), openers(b)), nil
	}
	minimum := int64(minimumThroughput(cb))
	if r.Calls != nil && *r.Calls < minimum {
		return j.with(PhaseInconclusive, "revision %s made %d calls over its pods' windows, fewer than minimumThroughput %d: too quiet to judge",
			revision, *r.Calls, minimum), nil
	}
	var s strings.Builder
	fmt.Fprintf(&s, "revision %s is %s (%s", revision, stateWord(r), openers(r))
	if r.Calls != nil {
		fmt.Fprintf(&s, ", %d calls", *r.Calls)
	}
	s.WriteString(")")
	if haveBaseline {
		fmt.Fprintf(&s, "; baseline %s is %s (%s)", b.Revision, stateWord(b), openers(b))
	}
	if r.Calls == nil {
		s.WriteString("; its pods report no call counts (a breaker without retryBudget or throttle does not), so a quiet revision passes as a healthy one")
	}
	return j.with(PhaseSuccessful, "%s", s.String()), nil
}

func (j Judgement) with(p Phase, format string, args ...any) Judgement {
	j.Phase, j.Reason = p, fmt.Sprintf(format, args...)
	return j
}

// checkRevision says what is wrong with a revision named in a question: it is a label
// value, which is all a revision can be.
func checkRevision(param, v string) error {
	if v == "" {
		return fmt.Errorf("%s is required: the pod-template-hash (or rollouts-pod-template-hash, controller-revision-hash) of the revision's pods", param)
	}
	if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
		return fmt.Errorf("%s %q is not a revision: %s", param, v, strings.Join(errs, "; "))
	}
	return nil
}

func find(revs []resiliencev1alpha1.RevisionStatus, name string) (resiliencev1alpha1.RevisionStatus, bool) {
	for _, r := range revs {
		if r.Revision == name {
			return r, true
		}
	}
	return resiliencev1alpha1.RevisionStatus{}, false
}

// largestOther is the revision with the most reporting pods other than name: the
// baseline by default. status.revisions is in that order already; the pods are compared
// again so that the choice does not rest on it.
func largestOther(revs []resiliencev1alpha1.RevisionStatus, name string) (resiliencev1alpha1.RevisionStatus, bool) {
	var best resiliencev1alpha1.RevisionStatus
	found := false
	for _, r := range revs {
		if r.Revision != name && r.Pods > 0 && (!found || r.Pods > best.Pods) {
			best, found = r, true
		}
	}
	return best, found
}

// forced says why cb's circuits are held whatever the calls say ("" when they are not).
func forced(cb *resiliencev1alpha1.CircuitBreaker) string {
	for _, c := range cb.Status.Conditions {
		if c.Type == resiliencev1alpha1.ConditionOverridden && c.Status == "True" && cb.Spec.Override != nil {
			return fmt.Sprintf("breaker %s is held %s by spec.override", cb.Name, cb.Spec.Override.Mode)
		}
	}
	switch cb.Spec.Mode {
	case resiliencev1alpha1.ModeForcedOpen, resiliencev1alpha1.ModeForcedClosed:
		return fmt.Sprintf("breaker %s is held %s by spec.mode", cb.Name, cb.Spec.Mode)
	}
	return ""
}

// isOpen says whether a revision is open: its verdict is, or its pods' earned Opens
// reach the quorum even though an earned Closed has since ended its verdict.
func isOpen(r resiliencev1alpha1.RevisionStatus, quorumPercent int32) bool {
	return r.State == resiliencev1alpha1.StateOpen || (r.Pods > 0 && r.Open >= need(r.Pods, quorumPercent))
}

// need is how many earned Opens open a revision of pods: the quorum, and at least one,
// as for the fleet (docs/design.md §5.12).
func need(pods, quorumPercent int32) int32 {
	return max(1, (quorumPercent*pods+99)/100)
}

func quorumOf(cb *resiliencev1alpha1.CircuitBreaker) int32 {
	if q := cb.Spec.FleetQuorumPercent; q != nil {
		return *q
	}
	return resiliencev1alpha1.DefaultFleetQuorumPercent
}

func minimumThroughput(cb *resiliencev1alpha1.CircuitBreaker) int32 {
	if m := cb.Spec.MinimumThroughput; m != nil {
		return *m
	}
	return resiliencev1alpha1.DefaultMinimumThroughput
}

func openers(r resiliencev1alpha1.RevisionStatus) string {
	return fmt.Sprintf("%d of %d pods opened it themselves", r.Open, r.Pods)
}

func stateWord(r resiliencev1alpha1.RevisionStatus) string {
	switch r.State {
	case resiliencev1alpha1.StateOpen:
		return "open"
	case resiliencev1alpha1.StateHalfOpen:
		return "half-open"
	default:
		return "closed"
	}
}
