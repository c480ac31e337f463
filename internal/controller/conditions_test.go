package controller

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/counting"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// These tests need no cluster: the conditions and the status are a pure function of what
// the reports add up to (internal/counting, which tests the adding up itself).

// member is one pod's entry of its own BreakerReport as the index reads it: its since
// attested, its revision from the pod cache.
type member struct {
	pod      string
	entry    resiliencev1alpha1.BreakerReportEntry
	since    time.Time
	revision string
}

// entriesOf reads members as a pod's own reports.
func entriesOf(members []member) []counting.Entry {
	entries := make([]counting.Entry, len(members))
	for i := range members {
		m := &members[i]
		entries[i] = counting.FromPod(m.pod, &m.entry, m.since, m.revision)
	}
	return entries
}

// aggregate is what the members add up to, as a pod's own reports.
func aggregate(cb *resiliencev1alpha1.CircuitBreaker, members []member) counting.View {
	return counting.Aggregate(cb, entriesOf(members))
}

// decideFleet is the fleet the members decide, as a pod's own reports.
func decideFleet(cb *resiliencev1alpha1.CircuitBreaker, members []member) counting.FleetDecision {
	return counting.DecideFleet(cb, entriesOf(members))
}

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

const (
	closed   = resiliencev1alpha1.StateClosed
	open     = resiliencev1alpha1.StateOpen
	halfOpen = resiliencev1alpha1.StateHalfOpen

	started   = breakerconfig.ReasonStarted
	tripped   = breakerconfig.ReasonTripped
	failed    = breakerconfig.ReasonProbeFailed
	succeeded = breakerconfig.ReasonProbesSucceeded
	timedOut  = breakerconfig.ReasonTimedOut
	adopted   = breakerconfig.ReasonAdopted
)

// at is a pod's entry for breaker "b" reached at t0+offset, on generation 1, as readReports
// makes it (since not clamped).
func at(pod string, state resiliencev1alpha1.State, reason string, offset time.Duration) member {
	since := t0.Add(offset)
	return member{pod: pod, since: since, entry: resiliencev1alpha1.BreakerReportEntry{
		Name: "b", PodCircuit: resiliencev1alpha1.PodCircuit{State: state, Since: metav1.NewTime(since), ConfigGeneration: 1}, Reason: reason,
	}}
}

// fleetBreaker is a Fleet breaker created an hour before t0, at generation 1, whose open
// period (1s) is shorter than the skew: any earned Closed after the open counts.
func fleetBreaker(quorum int32) *resiliencev1alpha1.CircuitBreaker {
	return &resiliencev1alpha1.CircuitBreaker{
		ObjectMeta: metav1.ObjectMeta{Name: "b", Generation: 1, CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour))},
		Spec: resiliencev1alpha1.CircuitBreakerSpec{Scope: resiliencev1alpha1.ScopeFleet, FleetQuorumPercent: ptr.To(quorum),
			OpenTimeout: &metav1.Duration{Duration: time.Second}},
	}
}

// closedPods returns n pods named prefix-i that have not moved since t0.
func closedPods(prefix string, n int) []member {
	out := make([]member, n)
	for i := range out {
		out[i] = at(fmt.Sprintf("%s-%d", prefix, i), closed, started, 0)
	}
	return out
}

// A status the API server stored and returned is the status the next reconcile computes
// from the same reports, or the controller would patch it on every reconcile. Reports carry
// milliseconds; status.members times are whole seconds.
func TestDesiredStatusSurvivesTheRoundTrip(t *testing.T) {
	cb := fleetBreaker(0)
	cb.Namespace = "ns"
	members := []member{at("a", open, tripped, 1500*time.Millisecond), at("b", closed, started, 250*time.Millisecond)}
	o := outcome{breaker: cb}
	desired := desiredStatus(o, aggregate(cb, members))
	raw, err := json.Marshal(desired)
	if err != nil {
		t.Fatal(err)
	}
	var stored resiliencev1alpha1.CircuitBreaker
	if err := json.Unmarshal(raw, &stored); err != nil {
		t.Fatal(err)
	}
	again := desiredStatus(outcome{breaker: &stored}, aggregate(&stored, members))
	if !equality.Semantic.DeepEqual(stored.Status, again.Status) {
		t.Errorf("stored status differs from the one computed again:\nstored %+v\nagain  %+v", stored.Status, again.Status)
	}
}

// The conditions carry the view: each reason in its place, the controller's own texts, and
// the counted messages (an open circuit's, a fleet's half-open one) as internal/counting
// words them, whose tests hold each wording.
func TestConditionsCarryTheView(t *testing.T) {
	podScope := &resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "b", Generation: 1}}
	behind := at("b", closed, started, 0)
	behind.entry.ConfigGeneration = 0
	refusing := at("b", closed, started, 0)
	refusing.entry.ConfigError = "window: bad"
	tenPods := append(closedPods("p", 8), at("x", open, tripped, 5*time.Second), at("y", open, tripped, 6*time.Second))
	for _, tc := range []struct {
		name                          string
		cb                            *resiliencev1alpha1.CircuitBreaker
		members                       []member
		open                          metav1.ConditionStatus
		openReason, openMessage       string // openMessage "": the view's own
		applied                       metav1.ConditionStatus
		appliedReason, appliedMessage string
	}{
		{"no members", podScope, nil,
			metav1.ConditionUnknown, "NoMembers", "No pod reports this breaker yet",
			metav1.ConditionUnknown, "NoMembers", "No pod reports this breaker yet"},
		{"closed", podScope, closedPods("p", 2),
			metav1.ConditionFalse, "CircuitClosed", "Every reporting pod has the circuit closed",
			metav1.ConditionTrue, "AllMembersApplied", "All 2 pods run generation 1"},
		{"open", podScope, []member{at("web-1", open, tripped, 0), at("web-2", closed, started, 0)},
			metav1.ConditionTrue, "CircuitOpen", "",
			metav1.ConditionTrue, "AllMembersApplied", "All 2 pods run generation 1"},
		{"the fleet open", fleetBreaker(0), []member{at("x", open, tripped, 0), at("y", open, adopted, time.Second)},
			metav1.ConditionTrue, "CircuitOpen", "",
			metav1.ConditionTrue, "AllMembersApplied", "All 2 pods run generation 1"},
		{"half-open", podScope, []member{at("a", halfOpen, timedOut, 0)},
			metav1.ConditionFalse, "CircuitHalfOpen", "Probing whether the dependency is back",
			metav1.ConditionTrue, "AllMembersApplied", "All 1 pods run generation 1"},
		{"the fleet short of its quorum", fleetBreaker(30), tenPods,
			metav1.ConditionFalse, "CircuitHalfOpen", "",
			metav1.ConditionTrue, "AllMembersApplied", "All 10 pods run generation 1"},
		{"behind", podScope, []member{at("a", closed, started, 0), behind},
			metav1.ConditionFalse, "CircuitClosed", "Every reporting pod has the circuit closed",
			metav1.ConditionFalse, "MembersBehind", "1 of 2 pods run generation 1"},
		{"refused", podScope, []member{at("a", closed, started, 0), refusing},
			metav1.ConditionFalse, "CircuitClosed", "Every reporting pod has the circuit closed",
			metav1.ConditionFalse, "MembersRejected", "1 of 2 pods refused the published configuration and keep their last good one: b: window: bad"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cb := tc.cb.DeepCopy()
			v := aggregate(cb, tc.members)
			if tc.openMessage == "" {
				tc.openMessage = v.FleetHalfOpen(cb)
				if v.State == open {
					tc.openMessage = v.OpenedMessage(cb)
				}
				if tc.openMessage == "" {
					t.Fatalf("the view words no message for %s", v.State)
				}
			}
			setOpenCondition(cb, v)
			setConfigAppliedCondition(cb, v)
			o := meta.FindStatusCondition(cb.Status.Conditions, resiliencev1alpha1.ConditionOpen)
			a := meta.FindStatusCondition(cb.Status.Conditions, resiliencev1alpha1.ConditionConfigApplied)
			if o.Status != tc.open || o.Reason != tc.openReason || o.Message != tc.openMessage {
				t.Errorf("Open = %s/%s %q\nwant   %s/%s %q", o.Status, o.Reason, o.Message, tc.open, tc.openReason, tc.openMessage)
			}
			if a.Status != tc.applied || a.Reason != tc.appliedReason || a.Message != tc.appliedMessage {
				t.Errorf("ConfigApplied = %s/%s %q\nwant            %s/%s %q", a.Status, a.Reason, a.Message, tc.applied, tc.appliedReason, tc.appliedMessage)
			}
		})
	}
}
