package gate

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

func rev(name string, pods int32, state resiliencev1alpha1.State, open int32, calls *int64) resiliencev1alpha1.RevisionStatus {
	return resiliencev1alpha1.RevisionStatus{Revision: name, Pods: pods, State: state, Open: open, Calls: calls}
}

const (
	closed   = resiliencev1alpha1.StateClosed
	open     = resiliencev1alpha1.StateOpen
	halfOpen = resiliencev1alpha1.StateHalfOpen
)

func breaker(revs ...resiliencev1alpha1.RevisionStatus) *resiliencev1alpha1.CircuitBreaker {
	cb := &resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "payments", Namespace: "shop"}}
	cb.Spec.MinimumThroughput = ptr.To[int32](20)
	cb.Status.Revisions = revs
	return cb
}

func TestJudge(t *testing.T) {
	busy := ptr.To[int64](500)
	forcedOpen := breaker(rev("new", 2, closed, 0, busy), rev("old", 4, closed, 0, busy))
	forcedOpen.Spec.Mode = resiliencev1alpha1.ModeForcedOpen
	overridden := breaker(rev("new", 2, open, 0, busy), rev("old", 4, closed, 0, busy))
	overridden.Spec.Override = &resiliencev1alpha1.Override{Mode: resiliencev1alpha1.ModeForcedClosed, Reason: "INC-1"}
	overridden.Status.Conditions = []metav1.Condition{{Type: resiliencev1alpha1.ConditionOverridden, Status: metav1.ConditionTrue}}
	expiredOverride := breaker(rev("new", 2, open, 2, busy), rev("old", 4, closed, 0, busy))
	expiredOverride.Spec.Override = &resiliencev1alpha1.Override{Mode: resiliencev1alpha1.ModeForcedClosed, Reason: "INC-1"}
	expiredOverride.Status.Conditions = []metav1.Condition{{Type: resiliencev1alpha1.ConditionOverridden, Status: metav1.ConditionFalse}}
	halfQuorum := func(revs ...resiliencev1alpha1.RevisionStatus) *resiliencev1alpha1.CircuitBreaker {
		cb := breaker(revs...)
		cb.Spec.FleetQuorumPercent = ptr.To[int32](50)
		return cb
	}

	for _, tc := range []struct {
		name               string
		cb                 *resiliencev1alpha1.CircuitBreaker
		revision, baseline string
		want               Phase
		wantBaseline       string // "" for none
		wantReason         string // a part of the reason
	}{
		{"only the new revision's pods open", breaker(rev("new", 2, open, 2, busy), rev("old", 4, closed, 0, busy)),
			"new", "", PhaseFailed, "old", "revision new is open (2 of 2 pods opened it themselves) while baseline old is closed"},
		{"earned Opens at the quorum though an earned Closed ended the verdict", halfQuorum(rev("new", 4, halfOpen, 2, busy), rev("old", 4, closed, 0, busy)),
			"new", "old", PhaseFailed, "old", "2 of 4 pods"},
		{"earned Opens below the quorum", halfQuorum(rev("new", 4, halfOpen, 1, busy), rev("old", 4, closed, 0, busy)),
			"new", "old", PhaseSuccessful, "old", "revision new is half-open (1 of 4"},
		{"baseline open only by adopting the fleet's verdict", breaker(rev("new", 1, open, 1, busy), rev("old", 9, halfOpen, 0, busy)),
			"new", "", PhaseFailed, "old", "baseline old is half-open (0 of 9"},
		{"a shared outage: both open", breaker(rev("old", 4, open, 4, busy), rev("new", 2, open, 2, busy)),
			"new", "", PhaseInconclusive, "old", "both open"},
		{"open with nothing to compare", breaker(rev("new", 3, open, 3, busy)),
			"new", "", PhaseInconclusive, "", "no other revision reports breaker payments"},
		{"too quiet to judge", breaker(rev("new", 2, closed, 0, ptr.To[int64](19)), rev("old", 4, closed, 0, busy)),
			"new", "", PhaseInconclusive, "old", "made 19 calls over its pods' windows, fewer than minimumThroughput 20"},
		{"quiet but open: the Open is evidence enough", breaker(rev("new", 2, open, 2, ptr.To[int64](0)), rev("old", 4, closed, 0, busy)),
			"new", "", PhaseFailed, "old", "is open"},
		{"exactly minimumThroughput calls", breaker(rev("new", 2, closed, 0, ptr.To[int64](20)), rev("old", 4, closed, 0, busy)),
			"new", "", PhaseSuccessful, "old", "20 calls"},
		{"healthy", breaker(rev("old", 4, closed, 0, busy), rev("new", 2, closed, 0, busy)),
			"new", "", PhaseSuccessful, "old", "revision new is closed (0 of 2 pods opened it themselves, 500 calls); baseline old is closed"},
		{"healthy while the baseline fails", breaker(rev("old", 4, open, 4, busy), rev("new", 2, closed, 0, busy)),
			"new", "", PhaseSuccessful, "old", "baseline old is open"},
		{"no call counts reported", breaker(rev("old", 4, closed, 0, nil), rev("new", 2, closed, 0, nil)),
			"new", "", PhaseSuccessful, "old", "report no call counts"},
		{"no pod of the revision", breaker(rev("old", 4, closed, 0, busy)),
			"new", "", PhaseInconclusive, "old", "no running pod of revision new"},
		{"a revision listed with no pods", breaker(rev("new", 0, closed, 0, nil), rev("old", 4, closed, 0, busy)),
			"new", "", PhaseInconclusive, "old", "no running pod of revision new"},
		{"a named baseline with no pods", breaker(rev("new", 2, open, 2, busy), rev("old", 4, closed, 0, busy)),
			"new", "older", PhaseInconclusive, "older", "no running pod of baseline older"},
		{"the default baseline has the most pods, whatever the order", breaker(rev("new", 9, closed, 0, busy), rev("a", 2, closed, 0, busy), rev("b", 5, open, 5, busy)),
			"new", "", PhaseSuccessful, "b", "baseline b is open"},
		{"a named baseline over the default", breaker(rev("new", 2, open, 2, busy), rev("a", 5, open, 5, busy), rev("b", 1, closed, 0, busy)),
			"new", "b", PhaseFailed, "b", "while baseline b is closed"},
		{"forced open by spec.mode", forcedOpen, "new", "", PhaseInconclusive, "old", "held ForcedOpen by spec.mode"},
		{"forced closed by an override in force", overridden, "new", "", PhaseInconclusive, "old", "held ForcedClosed by spec.override"},
		{"an override that ran out holds nothing", expiredOverride, "new", "", PhaseFailed, "old", "is open"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j, err := Judge(tc.cb, tc.revision, tc.baseline)
			if err != nil {
				t.Fatal(err)
			}
			if j.Phase != tc.want || !strings.Contains(j.Reason, tc.wantReason) {
				t.Errorf("Judge = %s %q, want %s with %q", j.Phase, j.Reason, tc.want, tc.wantReason)
			}
			if j.Revision.Revision != tc.revision {
				t.Errorf("revision line %+v, want %s's", j.Revision, tc.revision)
			}
			switch {
			case tc.wantBaseline == "" && j.Baseline != nil:
				t.Errorf("baseline %+v, want none", *j.Baseline)
			case tc.wantBaseline != "" && (j.Baseline == nil || j.Baseline.Revision != tc.wantBaseline):
				t.Errorf("baseline %+v, want %s", j.Baseline, tc.wantBaseline)
			}
		})
	}
}

func TestJudgeRefusesMalformedQuestions(t *testing.T) {
	cb := breaker(rev("new", 2, closed, 0, nil))
	for _, tc := range []struct{ revision, baseline, want string }{
		{"", "", "revision is required"},
		{"new", "new", `baseline "new" is the revision judged`},
		{"a b", "", `revision "a b" is not a revision`},
		{"new", strings.Repeat("x", 64), "baseline"},
	} {
		if _, err := Judge(cb, tc.revision, tc.baseline); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Judge(%q, %q) = %v, want an error saying %q", tc.revision, tc.baseline, err, tc.want)
		}
	}
}
