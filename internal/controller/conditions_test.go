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
	manual    = breakerconfig.ReasonManual
	failed    = breakerconfig.ReasonProbeFailed
	succeeded = breakerconfig.ReasonProbesSucceeded
	timedOut  = breakerconfig.ReasonTimedOut
	adopted   = breakerconfig.ReasonAdopted
	forced    = breakerconfig.ReasonForced
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

func TestConditionMessages(t *testing.T) {
	s := time.Second
	withEvidence := func(m member) member {
		m.entry.FailureRatePercent, m.entry.Calls = ptr.To[int32](55), ptr.To[int64](40)
		return m
	}
	podScope := &resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "b", Generation: 1}}
	slowScope := podScope.DeepCopy()
	slowScope.Spec.SlowCallDuration = &metav1.Duration{Duration: 2 * time.Second}
	slowFleet := fleetBreaker(0)
	slowFleet.Spec.SlowCallDuration = &metav1.Duration{Duration: 250 * time.Millisecond}
	slowFleet.Spec.MaxOpenTimeout = &metav1.Duration{Duration: time.Minute} // its 2nd open lasts 2s
	slowly := func(m member) member {
		m.entry.Trigger = breakerconfig.TriggerSlowCallRate
		m.entry.SlowCallRatePercent, m.entry.FailureRatePercent, m.entry.Calls = ptr.To[int32](85), ptr.To[int32](0), ptr.To[int64](20)
		return m
	}
	backedOff := func(k int32, d time.Duration, m member) member {
		m.entry.ConsecutiveOpens, m.entry.OpenTimeout = k, &metav1.Duration{Duration: d}
		return m
	}
	trigger := func(tr string, m member) member { m.entry.Trigger = tr; return m }
	tenPods := func(opens ...member) []member { return append(closedPods("p", 10-len(opens)), opens...) }
	for _, tc := range []struct {
		name                          string
		cb                            *resiliencev1alpha1.CircuitBreaker
		members                       []member
		open                          metav1.ConditionStatus
		openReason, openMessage       string
		applied                       metav1.ConditionStatus
		appliedReason, appliedMessage string
	}{
		{"no members", podScope, nil,
			metav1.ConditionUnknown, "NoMembers", "No pod reports this breaker yet",
			metav1.ConditionUnknown, "NoMembers", "No pod reports this breaker yet"},
		{"closed", podScope, closedPods("p", 2),
			metav1.ConditionFalse, "CircuitClosed", "Every reporting pod has the circuit closed",
			metav1.ConditionTrue, "AllMembersApplied", "All 2 pods run generation 1"},
		{"Pod scope: names the pod, its reason and its evidence", podScope,
			[]member{at("no-evidence", open, tripped, 0), withEvidence(at("web-7d9f", open, tripped, 0)), at("other", closed, started, 9*s)},
			metav1.ConditionTrue, "CircuitOpen", "Pod web-7d9f opened the circuit at 2026-11-29T12:00:00Z (Tripped): 55% of 40 calls failed",
			metav1.ConditionTrue, "AllMembersApplied", "All 3 pods run generation 1"},
		{"Pod scope: a slow-call trip says so, with the rate and what is slow", slowScope,
			[]member{slowly(at("web-1", open, tripped, 0)), at("web-2", closed, started, 0)},
			metav1.ConditionTrue, "CircuitOpen", "Pod web-1 opened the circuit at 2026-11-29T12:00:00Z (Tripped): slow-call rate 85% of 20 calls (slow: 2s or longer)",
			metav1.ConditionTrue, "AllMembersApplied", "All 2 pods run generation 1"},
		{"Pod scope: a failure-rate trip", podScope,
			[]member{trigger(breakerconfig.TriggerFailureRate, withEvidence(at("web-1", open, tripped, 0)))},
			metav1.ConditionTrue, "CircuitOpen", "Pod web-1 opened the circuit at 2026-11-29T12:00:00Z (Tripped): 55% of 40 calls failed",
			metav1.ConditionTrue, "AllMembersApplied", "All 1 pods run generation 1"},
		{"Pod scope: a slow probe, backed off", slowScope,
			[]member{backedOff(3, 2*time.Minute, trigger(breakerconfig.TriggerSlowProbe, at("web-1", open, failed, 0)))},
			metav1.ConditionTrue, "CircuitOpen", "Pod web-1 opened the circuit at 2026-11-29T12:00:00Z (ProbeFailed): a probe was slow (slow: 2s or longer). Open for 2m0s, the 3rd consecutive open",
			metav1.ConditionTrue, "AllMembersApplied", "All 1 pods run generation 1"},
		{"Pod scope: a failed probe, a first open says no period", podScope,
			[]member{backedOff(1, 30*time.Second, trigger(breakerconfig.TriggerFailedProbe, at("web-1", open, failed, 0)))},
			metav1.ConditionTrue, "CircuitOpen", "Pod web-1 opened the circuit at 2026-11-29T12:00:00Z (ProbeFailed): a probe failed",
			metav1.ConditionTrue, "AllMembersApplied", "All 1 pods run generation 1"},
		{"Fleet: a slow-call trip and the verdict's backed-off period", slowFleet,
			[]member{backedOff(2, 2*time.Second, slowly(at("x", open, failed, 5*s))), backedOff(1, time.Second, at("y", open, adopted, 1*s))},
			metav1.ConditionTrue, "CircuitOpen", "The fleet is open since 2026-11-29T12:00:05Z: 1 of 2 pods opened on their own evidence (quorum 1 pod): x: slow-call rate 85% of 20 calls (slow: 250ms or longer). Open for 2s, the 2nd consecutive open",
			metav1.ConditionTrue, "AllMembersApplied", "All 2 pods run generation 1"},
		{"half-open", podScope, []member{at("a", halfOpen, timedOut, 0)},
			metav1.ConditionFalse, "CircuitHalfOpen", "Probing whether the dependency is back",
			metav1.ConditionTrue, "AllMembersApplied", "All 1 pods run generation 1"},
		{"quorum 30%: two of ten say how close it is", fleetBreaker(30),
			tenPods(at("x", open, tripped, 5*s), at("y", open, tripped, 6*s)),
			metav1.ConditionFalse, "CircuitHalfOpen", "2 of 10 pods open on their own evidence, quorum 30% needs 3",
			metav1.ConditionTrue, "AllMembersApplied", "All 10 pods run generation 1"},
		{"quorum 30%: three of ten open it and are named", fleetBreaker(30),
			tenPods(withEvidence(at("x", open, tripped, 5*s)), at("y", open, manual, 6*s), at("z", open, failed, 7*s)),
			metav1.ConditionTrue, "CircuitOpen", "The fleet is open since 2026-11-29T12:00:05Z: 3 of 10 pods opened on their own evidence (quorum 30%): z; y; x: 55% of 40 calls failed",
			metav1.ConditionTrue, "AllMembersApplied", "All 10 pods run generation 1"},
		{"behind", podScope, []member{at("a", closed, started, 0), func() member { m := at("b", closed, started, 0); m.entry.ConfigGeneration = 0; return m }()},
			metav1.ConditionFalse, "CircuitClosed", "Every reporting pod has the circuit closed",
			metav1.ConditionFalse, "MembersBehind", "1 of 2 pods run generation 1"},
		{"refused", podScope, []member{at("a", closed, started, 0), func() member { m := at("b", closed, started, 0); m.entry.ConfigError = "window: bad"; return m }()},
			metav1.ConditionFalse, "CircuitClosed", "Every reporting pod has the circuit closed",
			metav1.ConditionFalse, "MembersRejected", "1 of 2 pods refused the published configuration and keep their last good one: b: window: bad"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cb := tc.cb.DeepCopy()
			v := aggregate(cb, tc.members)
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
