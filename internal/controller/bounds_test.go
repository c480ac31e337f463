package controller

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/counting"
)

// What one pod's report says is bounded by what the operator saw and what the spec allows
// (docs/design.md §5.12). These tests need no cluster.

// A century-long Closed from one pod: the report's managedFields, which a client may
// write, are not the server's clock; only the operator's first sight is.
func TestObservationsAreTheOperatorsClockNotTheReports(t *testing.T) {
	century := t0.AddDate(100, 0, 0)
	report := func(uid types.UID, entries ...resiliencev1alpha1.BreakerReportEntry) *resiliencev1alpha1.BreakerReport {
		return &resiliencev1alpha1.BreakerReport{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pod-a", UID: uid, ManagedFields: []metav1.ManagedFieldsEntry{
				{Manager: "forged", Operation: metav1.ManagedFieldsOperationUpdate, Time: ptr.To(metav1.NewTime(century))},
			}},
			Breakers: entries,
		}
	}
	line := func(name string, state resiliencev1alpha1.State, reason string, since time.Time) resiliencev1alpha1.BreakerReportEntry {
		return resiliencev1alpha1.BreakerReportEntry{Name: name, PodCircuit: resiliencev1alpha1.PodCircuit{State: state, Since: metav1.NewTime(since)}, Reason: reason}
	}
	var o firstSight
	forged := report("u1", line("b", closed, succeeded, century), line("c", open, tripped, t0.Add(-time.Minute)))
	o.observe(forged, t0)
	seen := o.firstSeen(forged, t0.Add(time.Minute))
	b, c := counting.Attested(century, seen[0]), counting.Attested(t0.Add(-time.Minute), seen[1])
	if !b.Equal(t0.Add(counting.MaxClockSkew)) || !c.Equal(t0.Add(-time.Minute)) {
		t.Errorf("since %s and %s, want first sight + skew and the pod's own", b, c)
	}
	withCalls := func(e resiliencev1alpha1.BreakerReportEntry) resiliencev1alpha1.BreakerReportEntry {
		e.Calls = ptr.To[int64](40)
		return e
	}

	for _, tc := range []struct {
		name string
		rep  *resiliencev1alpha1.BreakerReport
		at   time.Time // when the watch delivers it
		want []time.Time
	}{
		{"the same entries again, counts changed: first sight stays",
			report("u1", withCalls(line("b", closed, succeeded, century)), line("c", open, tripped, t0.Add(-time.Minute))), t0.Add(time.Hour),
			[]time.Time{t0, t0}},
		{"an entry with another since is another entry",
			report("u1", line("b", closed, succeeded, century.Add(time.Second)), line("c", open, tripped, t0.Add(-time.Minute))), t0.Add(2 * time.Hour),
			[]time.Time{t0.Add(2 * time.Hour), t0}},
		{"a new pod's report under the name is seen afresh",
			report("u2", line("c", open, tripped, t0.Add(-time.Minute))), t0.Add(3 * time.Hour),
			[]time.Time{t0.Add(3 * time.Hour)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o.observe(tc.rep, tc.at)
			got := o.firstSeen(tc.rep, tc.at.Add(time.Hour))
			for i := range tc.want {
				if !got[i].Equal(tc.want[i]) {
					t.Errorf("entry %d first seen %s, want %s", i, got[i], tc.want[i])
				}
			}
		})
	}

	// A reconcile reads what the watch has not delivered yet: now, recorded by no one.
	unseen := report("u2", line("c", closed, succeeded, century))
	if got := o.firstSeen(unseen, t0.Add(5*time.Hour)); !got[0].Equal(t0.Add(5 * time.Hour)) {
		t.Errorf("undelivered entry first seen %s, want now", got[0])
	}
	if got := o.firstSeen(report("u2", line("c", open, tripped, t0.Add(-time.Minute))), t0.Add(6*time.Hour)); !got[0].Equal(t0.Add(3 * time.Hour)) {
		t.Errorf("firstSeen recorded what it read: %s", got[0])
	}
	// A restarted operator has seen nothing: first sight is now.
	var restarted firstSight
	if got := restarted.firstSeen(forged, t0.Add(7*time.Hour)); !got[0].Equal(t0.Add(7 * time.Hour)) {
		t.Errorf("after a restart first seen %s, want now", got[0])
	}
	o.forget(types.NamespacedName{Namespace: "ns", Name: "pod-a"})
	if o.len() != 0 {
		t.Errorf("%d reports remembered after the delete", o.len())
	}
}

// What CEL cannot check: an until beyond the 7-day bound counts as 7 days after the
// operator first saw the override, and the Overridden condition says so.
func TestOverrideAtBoundsTheUntil(t *testing.T) {
	week := resiliencev1alpha1.MaxOverrideDuration
	for _, tc := range []struct {
		name        string
		until       time.Time
		now         time.Time
		wantUntil   time.Time
		wantBounded bool
		wantInForce bool
	}{
		{"within the bound", t0.Add(time.Hour), t0, t0.Add(time.Hour), false, true},
		{"at the bound", t0.Add(week), t0, t0.Add(week), false, true},
		{"8 days ahead", t0.Add(8 * 24 * time.Hour), t0, t0.Add(week), true, true},
		{"year 9999", time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), t0, t0.Add(week), true, true},
		{"year 9999, a week later", time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), t0.Add(week), t0.Add(week), true, false},
		{"in the past", t0.Add(-time.Hour), t0, t0.Add(-time.Hour), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cb := overridden(tc.until, "alice")
			s := overrideAt(cb, tc.now, t0)
			if !s.until.Equal(tc.wantUntil) || s.bounded != tc.wantBounded || s.inForce() != tc.wantInForce {
				t.Errorf("until %s bounded %v in force %v; want %s %v %v", s.until, s.bounded, s.inForce(), tc.wantUntil, tc.wantBounded, tc.wantInForce)
			}
			setOverriddenCondition(cb, s)
			c := meta.FindStatusCondition(cb.Status.Conditions, resiliencev1alpha1.ConditionOverridden)
			if says := strings.Contains(c.Message, "is more than 7 days after the operator first saw the override"); says != tc.wantBounded {
				t.Errorf("message %q: says it is bounded %v, want %v", c.Message, says, tc.wantBounded)
			}
			if tc.wantBounded && !strings.Contains(c.Message, tc.wantUntil.UTC().Format(time.RFC3339)) {
				t.Errorf("message %q does not name the bound", c.Message)
			}
		})
	}
}

// Writes of one breaker's status are at least minWriteInterval apart, counts alone
// minCountsInterval; the first after a quiet interval goes at once; the state changes a
// write coalesced are counted.
func TestStatusWritesAreSpaced(t *testing.T) {
	var r CircuitBreakerReconciler
	key := types.NamespacedName{Namespace: "ns", Name: "b"}
	counts := func(n int32) *resiliencev1alpha1.MemberCounts { return &resiliencev1alpha1.MemberCounts{Reporting: n} }
	stored := &resiliencev1alpha1.CircuitBreaker{Status: resiliencev1alpha1.CircuitBreakerStatus{State: closed, MemberCounts: counts(1)}}
	opened := stored.DeepCopy()
	opened.Status.State = open
	more := stored.DeepCopy()
	more.Status.MemberCounts = counts(2)

	if w := r.writeWait(key, stored, opened); w != 0 {
		t.Errorf("first write waits %s", w)
	}
	r.saw(key, stored, opened)
	if n := r.wrote(key, open); n != 0 {
		t.Errorf("a single change coalesced %d others", n)
	}
	if w := r.writeWait(key, stored, opened); w <= 0 || w > minWriteInterval {
		t.Errorf("a state change right after a write waits %s, want up to %s", w, minWriteInterval)
	}
	if w := r.writeWait(key, stored, more); w <= minWriteInterval || w > minCountsInterval {
		t.Errorf("a counts change right after a write waits %s, want up to %s", w, minCountsInterval)
	}
	// Open → Closed → Open → HalfOpen seen before the next write: it stands for 2 more.
	for _, s := range []resiliencev1alpha1.State{closed, open, halfOpen} {
		computed := opened.DeepCopy()
		computed.Status.State = s
		r.saw(key, opened, computed)
	}
	if n := r.wrote(key, halfOpen); n != 2 {
		t.Errorf("coalesced %d state changes, want 2", n)
	}
	r.forgetWrites("ns", nil)
	if w := r.writeWait(key, stored, opened); w != 0 {
		t.Errorf("a deleted breaker's record was kept: waits %s", w)
	}
}
