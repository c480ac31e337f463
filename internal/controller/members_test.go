package controller

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// These tests need no cluster: what the reports add up to is a pure function of them.

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
		Name: "b", State: state, Reason: reason, Since: metav1.NewTime(since), ConfigGeneration: 1,
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

func TestDecideFleet(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		name      string
		quorum    int32
		members   []member
		wantOpen  bool
		wantState string // the published verdict, "" for none
		wantSince time.Duration
		wantNeed  int
	}{
		{"no members", 0, nil, false, "", 0, 1},
		{"every pod just started", 0, closedPods("p", 3), false, "", 0, 1},
		{"one pod's calls open the fleet", 0,
			append(closedPods("p", 2), at("x", open, tripped, 5*s)), true, "Open", 5 * s, 1},
		{"Trip opens it", 0, []member{at("x", open, manual, 5*s)}, true, "Open", 5 * s, 1},
		{"a failed probe opens it", 0, []member{at("x", open, failed, 5*s)}, true, "Open", 5 * s, 1},
		{"an adopted Open moves nothing", 0, []member{at("x", open, adopted, 5*s)}, false, "", 0, 1},
		{"a forced Open moves nothing", 0, []member{at("x", open, forced, 5*s)}, false, "", 0, 1},
		{"a timeout moves nothing", 0, []member{at("x", halfOpen, timedOut, 5*s), at("y", open, timedOut, 6*s)}, false, "", 0, 1},
		{"a fresh pod's Closed does not close an open fleet", 0,
			[]member{at("x", open, tripped, 5*s), at("new", closed, started, 9*s)}, true, "Open", 5 * s, 1},
		{"an adopted Closed does not close it", 0,
			[]member{at("x", open, tripped, 5*s), at("y", closed, adopted, 9*s)}, true, "Open", 5 * s, 1},
		{"probes that succeed after the open close it", 0,
			[]member{at("x", open, tripped, 5*s), at("y", closed, succeeded, 9*s)}, false, "Closed", 9 * s, 1},
		{"probes that succeeded before the open do not", 0,
			[]member{at("x", open, tripped, 5*s), at("y", closed, succeeded, 4*s)}, true, "Open", 5 * s, 1},
		{"a tie goes to open", 0,
			[]member{at("x", open, tripped, 5*s), at("y", closed, succeeded, 5*s)}, true, "Open", 5 * s, 1},
		{"the Closed verdict is withdrawn once every pod is closed", 0,
			[]member{at("x", closed, adopted, 9*s), at("y", closed, succeeded, 9*s)}, false, "", 0, 1},
		{"an Open from before the breaker existed counts for nothing", 0,
			[]member{at("x", open, tripped, -2*time.Hour)}, false, "", 0, 1},
		{"quorum 30% of 10: two opens are not enough", 30,
			append(closedPods("p", 8), at("x", open, tripped, 5*s), at("y", open, tripped, 6*s)), false, "", 0, 3},
		{"quorum 30% of 10: the third opens it, since the third most recent", 30,
			append(closedPods("p", 7), at("x", open, tripped, 5*s), at("y", open, tripped, 6*s), at("z", open, manual, 7*s)), true, "Open", 5 * s, 3},
		{"quorum 30% of 10: with four, the quorum was complete at the second", 30,
			append(closedPods("p", 6), at("w", open, tripped, 1*s), at("x", open, tripped, 5*s), at("y", open, tripped, 6*s), at("z", open, manual, 7*s)), true, "Open", 5 * s, 3},
		{"quorum 30% of 10: adopted opens do not count toward it", 30,
			append(closedPods("p", 6), at("w", open, adopted, 1*s), at("x", open, adopted, 5*s), at("y", open, tripped, 6*s), at("z", open, manual, 7*s)), false, "", 0, 3},
		{"quorum 100% of 3: two are not enough", 100,
			append(closedPods("p", 1), at("x", open, tripped, 5*s), at("y", open, tripped, 6*s)), false, "", 0, 3},
		{"quorum 100% of 3: all three open it", 100,
			[]member{at("w", open, tripped, 2*s), at("x", open, tripped, 5*s), at("y", open, tripped, 6*s)}, true, "Open", 2 * s, 3},
		{"quorum 1% of one pod still needs that pod", 1, []member{at("x", open, tripped, 5*s)}, true, "Open", 5 * s, 1},
		{"quorum 30% with no pods needs one", 30, nil, false, "", 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := decideFleet(fleetBreaker(tc.quorum), tc.members)
			if d.open != tc.wantOpen || d.need != tc.wantNeed {
				t.Errorf("open %v need %d, want open %v need %d", d.open, d.need, tc.wantOpen, tc.wantNeed)
			}
			switch v := d.verdict; {
			case tc.wantState == "" && v != nil:
				t.Errorf("verdict %+v, want none", *v)
			case tc.wantState != "" && v == nil:
				t.Errorf("no verdict, want %s", tc.wantState)
			case v != nil && (v.State != tc.wantState || !v.Since.Equal(t0.Add(tc.wantSince))):
				t.Errorf("verdict %s since %s, want %s since %s", v.State, v.Since, tc.wantState, t0.Add(tc.wantSince))
			}
		})
	}
}

// A breaker deleted and created again under its name refuses the old breaker's Open, even
// though the report still names it.
func TestDecideFleetIgnoresOpensFromBeforeTheBreakerWasCreated(t *testing.T) {
	cb := fleetBreaker(0)
	cb.CreationTimestamp = metav1.NewTime(t0.Add(10 * time.Second))
	old := []member{at("x", open, tripped, 5*time.Second), at("y", closed, succeeded, 8*time.Second)}
	if d := decideFleet(cb, old); d.open || d.verdict != nil || len(d.openers) != 0 {
		t.Errorf("decision %+v, want nothing from before the breaker existed", d)
	}
	if d := decideFleet(cb, append(old, at("z", open, tripped, 10*time.Second))); !d.open {
		t.Error("an Open at the creation second must count")
	}
}

// A clock an hour ahead cannot hold the fleet open past a Closed earned after the
// report was written.
func TestAFutureOpenDoesNotPinTheFleet(t *testing.T) {
	rep := &resiliencev1alpha1.BreakerReport{
		ObjectMeta: metav1.ObjectMeta{Name: "skewed", ManagedFields: []metav1.ManagedFieldsEntry{{Time: ptr.To(metav1.NewTime(t0))}}},
		Breakers:   []resiliencev1alpha1.BreakerReportEntry{{Name: "b", State: open, Reason: tripped, Since: metav1.NewTime(t0.Add(time.Hour))}},
	}
	members := append(membersOf(rep, []time.Time{t0}), at("prober", closed, succeeded, 10*time.Second))
	d := decideFleet(fleetBreaker(0), members)
	if d.open || d.verdict == nil || d.verdict.State != "Closed" {
		t.Errorf("decision open=%v verdict=%+v, want closed by the later probes", d.open, d.verdict)
	}
}

func TestAggregate(t *testing.T) {
	cb := &resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "b", Generation: 2}}
	if v := aggregate(cb, nil); v.state != "" || v.counts != nil || v.listed != nil {
		t.Errorf("no members: %+v", v)
	}
	latest := func(m member) member { m.entry.ConfigGeneration = 2; return m }
	behind := at("d", closed, started, 0)
	rejected := latest(at("e", closed, started, 0))
	rejected.entry.ConfigError = "window: must be positive"
	members := []member{latest(at("a", closed, started, 0)), latest(at("b", halfOpen, timedOut, 0)), latest(at("c", open, tripped, 0)), behind, rejected}
	v := aggregate(cb, members)
	if v.state != open {
		t.Errorf("Pod scope: state %s, want the most severe, Open", v.state)
	}
	want := resiliencev1alpha1.MemberCounts{Reporting: 5, Closed: 3, Open: 1, HalfOpen: 1, OnLatestConfig: 3}
	if *v.counts != want {
		t.Errorf("counts %+v, want %+v", *v.counts, want)
	}
	if len(v.rejected) != 1 || v.rejected[0] != "e: window: must be positive" {
		t.Errorf("rejected %q", v.rejected)
	}
	if v.opener == nil || v.opener.pod != "c" || v.fleet != nil {
		t.Errorf("opener %+v fleet %+v", v.opener, v.fleet)
	}

	for _, tc := range []struct {
		name    string
		quorum  int32
		members []member
		want    resiliencev1alpha1.State
	}{
		{"Fleet: open when the fleet is", 0, []member{at("a", closed, started, 0), at("b", open, tripped, 5*time.Second)}, open},
		{"Fleet: an Open below the quorum is HalfOpen", 50, []member{at("a", closed, started, 0), at("b", closed, started, 0), at("c", open, tripped, 5*time.Second)}, halfOpen},
		{"Fleet: only adopted Opens is HalfOpen", 0, []member{at("a", open, adopted, 0)}, halfOpen},
		{"Fleet: a probing pod is HalfOpen", 0, []member{at("a", closed, started, 0), at("b", halfOpen, timedOut, 0)}, halfOpen},
		{"Fleet: closed once every pod is", 0, []member{at("a", closed, adopted, 9*time.Second), at("b", closed, succeeded, 9*time.Second)}, closed},
		{"Fleet: closed by probes while a pod is still open is HalfOpen", 0, []member{at("a", open, tripped, 0), at("b", closed, succeeded, 9*time.Second)}, halfOpen},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if v := aggregate(fleetBreaker(tc.quorum), tc.members); v.state != tc.want || v.fleet == nil {
				t.Errorf("state %s (fleet %+v), want %s", v.state, v.fleet, tc.want)
			}
		})
	}
}

func TestListedMostRelevantFirstAndAtMost20(t *testing.T) {
	cb := &resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "b", Generation: 2}}
	latest := func(m member) member { m.entry.ConfigGeneration = 2; return m }
	var members []member
	for i := range 30 { // closed, on the latest config: the least relevant
		members = append(members, latest(at(fmt.Sprintf("closed-%02d", i), closed, started, 0)))
	}
	behind := at("behind", closed, started, 0)
	refusing := latest(at("refusing", closed, started, 0))
	refusing.entry.ConfigError = "bad"
	members = append(members,
		behind, refusing,
		latest(at("probing", halfOpen, timedOut, 3*time.Second)),
		latest(at("open-old", open, tripped, 1*time.Second)),
		latest(at("open-new", open, tripped, 2*time.Second)),
		latest(at("open-new-too", open, manual, 2*time.Second)),
	)
	v := aggregate(cb, members)
	if v.counts.Reporting != 36 {
		t.Errorf("reporting %d, want every member counted", v.counts.Reporting)
	}
	if len(v.listed) != resiliencev1alpha1.MaxMembersListed {
		t.Fatalf("listed %d, want %d", len(v.listed), resiliencev1alpha1.MaxMembersListed)
	}
	var got []string
	for _, m := range v.listed {
		got = append(got, m.Pod)
	}
	want := []string{"open-new", "open-new-too", "open-old", "probing", "refusing", "behind"}
	for i := range 14 {
		want = append(want, fmt.Sprintf("closed-%02d", i))
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("listed\n%v\nwant\n%v", got, want)
	}
	if l := v.listed[0]; l.Reason != tripped || l.State != open || l.ConfigGeneration != 2 {
		t.Errorf("first listed %+v", l)
	}
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

func TestJoinLimited(t *testing.T) {
	if got := joinLimited([]string{"a", "b"}); got != "a; b" {
		t.Errorf("got %q", got)
	}
	if got := joinLimited([]string{"a", "b", "c", "d", "e", "f", "g"}); got != "a; b; c; d; e; and 2 more" {
		t.Errorf("got %q", got)
	}
}

func TestHalfOpenedMessage(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cb      *resiliencev1alpha1.CircuitBreaker
		members []member
		want    string
	}{
		{"probing", fleetBreaker(0), []member{at("a", halfOpen, timedOut, 0), at("b", closed, started, 0)},
			"1 of 2 pods are probing whether the dependency is back"},
		{"open below the quorum", fleetBreaker(50), []member{at("a", open, tripped, 0), at("b", closed, started, 0), at("c", closed, started, 0)},
			"1 of 3 pods open on their own evidence, quorum 50% needs 2"},
		{"closed by probes, a pod still open", fleetBreaker(0), []member{at("a", open, tripped, 0), at("b", closed, succeeded, 9*time.Second)},
			"A pod's probes closed the fleet at 2026-11-29T12:00:09Z; the other pods follow"},
		{"closed by probes, a pod adopted the old open", fleetBreaker(0), []member{at("a", open, adopted, 0), at("b", closed, succeeded, 9*time.Second)},
			"A pod's probes closed the fleet at 2026-11-29T12:00:09Z; the other pods follow"},
		{"Pod scope", &resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "b", Generation: 1}}, []member{at("a", halfOpen, timedOut, 0)},
			"1 of 1 pods are probing whether the dependency is back"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := aggregate(tc.cb, tc.members)
			if v.state != halfOpen {
				t.Fatalf("state %s, want HalfOpen", v.state)
			}
			if got := halfOpenedMessage(tc.cb, v); got != tc.want {
				t.Errorf("got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// Pods that open in the same millisecond are named in the same way whatever order the
// cache lists them in; otherwise each reconcile could write a different Open message.
func TestTheOpenerDoesNotDependOnTheOrderOfReports(t *testing.T) {
	cb := &resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "b", Generation: 1}}
	members := []member{at("c", open, tripped, time.Second), at("a", open, tripped, time.Second), at("b", open, tripped, time.Second), at("d", closed, started, 0)}
	want := openedMessage(cb, aggregate(cb, members))
	for range 20 {
		shuffled := slices.Clone(members)
		rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if got := openedMessage(cb, aggregate(cb, shuffled)); got != want {
			t.Fatalf("order %v: %q, want %q", shuffled, got, want)
		}
	}
	if !strings.HasPrefix(want, "Pod a opened") {
		t.Errorf("%q, want the first pod by name among equals", want)
	}
}

func TestOrdinal(t *testing.T) {
	for n, want := range map[int32]string{1: "1st", 2: "2nd", 3: "3rd", 4: "4th", 11: "11th", 12: "12th", 13: "13th", 21: "21st", 22: "22nd", 101: "101st", 111: "111th"} {
		if got := ordinal(n); got != want {
			t.Errorf("ordinal(%d) = %q, want %q", n, got, want)
		}
	}
}

// The open period on the aggregate: a Fleet breaker shows its verdict's, a Pod one the
// longest any pod reports; members carry their own lines whole.
func TestAggregateOpenPeriodAndMemberFields(t *testing.T) {
	period := func(k int32, d time.Duration, m member) member {
		m.entry.ConsecutiveOpens, m.entry.OpenTimeout = k, &metav1.Duration{Duration: d}
		return m
	}
	slow := period(3, 4*time.Second, at("a", open, failed, 5*time.Second))
	slow.entry.Trigger, slow.entry.SlowCallRatePercent, slow.entry.Calls = breakerconfig.TriggerSlowCallRate, ptr.To[int32](90), ptr.To[int64](10)
	members := []member{slow, period(2, 2*time.Second, at("b", halfOpen, timedOut, 4*time.Second)), at("c", closed, started, 0)}

	podScope := &resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "b", Generation: 1}}
	v := aggregate(podScope, members)
	if v.consecutiveOpens != 3 || v.openTimeout == nil || v.openTimeout.Duration != 4*time.Second {
		t.Errorf("Pod scope: %d %v, want the most any pod reports, 3 and 4s", v.consecutiveOpens, v.openTimeout)
	}
	l := v.listed[0]
	if l.Pod != "a" || l.Trigger != "SlowCallRate" || l.SlowCallRatePercent == nil || *l.SlowCallRatePercent != 90 ||
		l.ConsecutiveOpens != 3 || l.OpenTimeout == nil || l.OpenTimeout.Duration != 4*time.Second {
		t.Errorf("listed member %+v, want a's whole line", l)
	}
	if l.OpenTimeout == members[0].entry.OpenTimeout || l.SlowCallRatePercent == members[0].entry.SlowCallRatePercent {
		t.Error("status.members shares pointers with the reports, which are the cache's")
	}

	// The fleet opened on b's earlier failed probe (k=2) and a's later one (k=3): the
	// verdict, and so the status, is a's.
	fleetMembers := []member{members[0], period(2, 2*time.Second, at("b", open, failed, 1*time.Second)), at("c", open, adopted, 5*time.Second)}
	backoff := fleetBreaker(0)
	backoff.Spec.MaxOpenTimeout = &metav1.Duration{Duration: time.Minute}
	v = aggregate(backoff, fleetMembers)
	if v.state != open || v.consecutiveOpens != 3 || v.openTimeout == nil || v.openTimeout.Duration != 4*time.Second {
		t.Errorf("Fleet: %s %d %v, want Open, the verdict's 3 and 4s", v.state, v.consecutiveOpens, v.openTimeout)
	}
	// Closed by probes: no open period, whatever a straggler still reports.
	v = aggregate(fleetBreaker(0), []member{members[0], at("b", closed, succeeded, 9*time.Second)})
	if v.consecutiveOpens != 0 || v.openTimeout != nil {
		t.Errorf("Fleet closed by probes: %d %v, want none", v.consecutiveOpens, v.openTimeout)
	}

	desired := desiredStatus(outcome{breaker: backoff}, aggregate(backoff, fleetMembers))
	if desired.Status.ConsecutiveOpens != 3 || desired.Status.OpenTimeout.Duration != 4*time.Second {
		t.Errorf("status %d %v", desired.Status.ConsecutiveOpens, desired.Status.OpenTimeout)
	}
}
