package counting

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// The per-revision aggregate (docs/design.md §10): the fleet rule per revision, one pod,
// one share.
func TestAggregateRevisions(t *testing.T) {
	cb := &resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "payments", CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour))}}
	memberOf := func(pod, revision string, state resiliencev1alpha1.State, reason string, rate *int32) member {
		e := resiliencev1alpha1.BreakerReportEntry{Name: "payments", Reason: reason, PodCircuit: resiliencev1alpha1.PodCircuit{
			State: state, Since: metav1.NewTime(t0), FailureRatePercent: rate}}
		return member{pod: pod, revision: revision, entry: e, since: t0}
	}

	t.Run("the fleet rule per revision, whatever the scope", func(t *testing.T) {
		quorum := cb.DeepCopy()
		quorum.Spec.FleetQuorumPercent = ptr.To[int32](50)
		got := aggregateRevisions(quorum, entriesOf(
			memberOf("a-0", "a", open, breakerconfig.ReasonTripped, ptr.To[int32](90)),
			memberOf("a-1", "a", closed, breakerconfig.ReasonStarted, nil),
			memberOf("a-2", "a", closed, breakerconfig.ReasonStarted, nil),
			memberOf("a-3", "a", closed, breakerconfig.ReasonStarted, nil),
			memberOf("b-0", "b", open, breakerconfig.ReasonProbeFailed, ptr.To[int32](100)),
			memberOf("b-1", "b", open, breakerconfig.ReasonManual, nil),
			memberOf("c-0", "c", open, breakerconfig.ReasonAdopted, nil),
			memberOf("c-1", "c", halfOpen, breakerconfig.ReasonTimedOut, nil),
			memberOf("none", "", open, breakerconfig.ReasonTripped, nil),
		))
		want := []resiliencev1alpha1.RevisionStatus{
			// One earned Open of four pods, below the 50 % quorum.
			{Revision: "a", Pods: 4, State: resiliencev1alpha1.StateHalfOpen, Open: 1, FailureRatePercent: ptr.To[int32](90)},
			{Revision: "b", Pods: 2, State: resiliencev1alpha1.StateOpen, Open: 2, FailureRatePercent: ptr.To[int32](100)},
			// Adopted and timed out: open, but not of its own doing.
			{Revision: "c", Pods: 2, State: resiliencev1alpha1.StateHalfOpen, Open: 0},
		}
		if !equality.Semantic.DeepEqual(got, want) {
			t.Errorf("aggregateRevisions =\n%+v\nwant\n%+v", got, want)
		}
	})

	t.Run("one pod cannot move its revision's calls or rate outside what the others report", func(t *testing.T) {
		throttled := cb.DeepCopy()
		throttled.Spec.Throttle = &resiliencev1alpha1.Throttle{K: ptr.To(2.0)}
		var ms []member
		for i := range 5 {
			m := memberOf(fmt.Sprintf("p-%d", i), "a", closed, breakerconfig.ReasonStarted, nil)
			m.entry.Requests, m.entry.Accepts = ptr.To[int64](100), ptr.To[int64](90)
			ms = append(ms, m)
		}
		// The liar: a window of 10^12 calls that all failed, to pass the revision's
		// failures off as enormous, or to drown them.
		ms[4].entry.Requests, ms[4].entry.Accepts = ptr.To[int64](breakerconfig.MaxTrafficCount), ptr.To[int64](0)
		got := aggregateRevisions(throttled, entriesOf(ms...))
		if len(got) != 1 || got[0].Calls == nil || *got[0].Calls != 4*100+4*100 {
			t.Fatalf("calls %v, want the liar counted as 4 times the median pod's 100: 800", got)
		}
		// (4 × 10 failed + 400 failed) / 800 ran.
		if r := got[0].FailureRatePercent; r == nil || *r != 55 {
			t.Errorf("failure rate %v, want 55", r)
		}
		rates := entriesOf(
			memberOf("p-0", "a", open, breakerconfig.ReasonTripped, ptr.To[int32](60)),
			memberOf("p-1", "a", open, breakerconfig.ReasonTripped, ptr.To[int32](70)),
			memberOf("p-2", "a", open, breakerconfig.ReasonTripped, ptr.To[int32](100)),
		)
		if r := aggregateRevisions(cb, rates)[0].FailureRatePercent; r == nil || *r != 70 {
			t.Errorf("rate %v, want the median, 70", r)
		}
	})

	t.Run("none without revisions", func(t *testing.T) {
		if got := aggregateRevisions(cb, entriesOf(memberOf("bare", "", open, breakerconfig.ReasonTripped, nil))); got != nil {
			t.Errorf("aggregateRevisions = %v, want nil", got)
		}
	})

	t.Run("at most 10 revisions, most pods first, then by name", func(t *testing.T) {
		var ms []member
		var want []string
		// Twelve revisions: r00 has 1 pod, r01 2, r02 3, r03 1, ...
		for r := range 12 {
			for p := range r%3 + 1 {
				ms = append(ms, memberOf(fmt.Sprintf("r%02d-%d", r, p), fmt.Sprintf("r%02d", r), closed, breakerconfig.ReasonStarted, nil))
			}
		}
		for _, pods := range []int{3, 2, 1} {
			for r := range 12 {
				if r%3+1 == pods {
					want = append(want, fmt.Sprintf("r%02d:%d", r, pods))
				}
			}
		}
		want = want[:resiliencev1alpha1.MaxRevisionsListed]
		var got []string
		for _, r := range aggregateRevisions(cb, entriesOf(ms...)) {
			got = append(got, fmt.Sprintf("%s:%d", r.Revision, r.Pods))
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("revisions %v, want %v", got, want)
		}
	})
}

// A change of a revision's verdict or of its earned Opens is news for a rollout gate; a
// change of its counts alone is not.
func TestRevisionsMoved(t *testing.T) {
	a := resiliencev1alpha1.RevisionStatus{Revision: "a", Pods: 3, State: closed}
	b := resiliencev1alpha1.RevisionStatus{Revision: "b", Pods: 1, State: closed}
	with := func(r resiliencev1alpha1.RevisionStatus, f func(*resiliencev1alpha1.RevisionStatus)) resiliencev1alpha1.RevisionStatus {
		f(&r)
		return r
	}
	for _, tc := range []struct {
		name     string
		was, now []resiliencev1alpha1.RevisionStatus
		want     bool
	}{
		{"nothing", []resiliencev1alpha1.RevisionStatus{a, b}, []resiliencev1alpha1.RevisionStatus{a, b}, false},
		{"counts alone", []resiliencev1alpha1.RevisionStatus{a, b}, []resiliencev1alpha1.RevisionStatus{with(a, func(r *resiliencev1alpha1.RevisionStatus) {
			r.Pods, r.Calls = 4, ptr.To[int64](7)
		}), b}, false},
		{"a state", []resiliencev1alpha1.RevisionStatus{a, b}, []resiliencev1alpha1.RevisionStatus{a, with(b, func(r *resiliencev1alpha1.RevisionStatus) { r.State = open })}, true},
		{"earned Opens", []resiliencev1alpha1.RevisionStatus{a, b}, []resiliencev1alpha1.RevisionStatus{with(a, func(r *resiliencev1alpha1.RevisionStatus) { r.Open = 1 }), b}, true},
		{"a revision more", []resiliencev1alpha1.RevisionStatus{a}, []resiliencev1alpha1.RevisionStatus{a, b}, true},
		{"another order", []resiliencev1alpha1.RevisionStatus{a, b}, []resiliencev1alpha1.RevisionStatus{b, a}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := RevisionsMoved(tc.was, tc.now); got != tc.want {
				t.Errorf("RevisionsMoved = %v, want %v", got, tc.want)
			}
		})
	}
}
