package controller

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func member(pod string, state resiliencev1alpha1.State, at time.Duration) resiliencev1alpha1.MemberStatus {
	return resiliencev1alpha1.MemberStatus{Pod: pod, State: state, Since: metav1.NewTime(t0.Add(at)), ConfigGeneration: 1}
}

const (
	closed   = resiliencev1alpha1.StateClosed
	open     = resiliencev1alpha1.StateOpen
	halfOpen = resiliencev1alpha1.StateHalfOpen
)

func TestFleetVerdict(t *testing.T) {
	for _, tc := range []struct {
		name      string
		members   []resiliencev1alpha1.MemberStatus
		wantState string // "" for no verdict
		wantSince time.Duration
	}{
		{"no members", nil, "", 0},
		{"all closed: nothing to share", []resiliencev1alpha1.MemberStatus{member("a", closed, 0), member("b", closed, 5)}, "", 0},
		{"one opens the fleet", []resiliencev1alpha1.MemberStatus{member("a", closed, 0), member("b", open, 5)}, "Open", 5},
		{"an older open loses to a newer close", []resiliencev1alpha1.MemberStatus{member("a", open, 5), member("b", closed, 9)}, "Closed", 9},
		{"a re-open after the close wins", []resiliencev1alpha1.MemberStatus{member("a", open, 12), member("b", closed, 9)}, "Open", 12},
		{"half-open is local, the open stays the verdict", []resiliencev1alpha1.MemberStatus{member("a", halfOpen, 40), member("b", open, 5)}, "Open", 5},
		{"all half-open: no verdict to give", []resiliencev1alpha1.MemberStatus{member("a", halfOpen, 40), member("b", halfOpen, 41)}, "", 0},
		{"a tie goes to open", []resiliencev1alpha1.MemberStatus{member("a", closed, 7), member("b", open, 7), member("c", halfOpen, 8)}, "Open", 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := fleetVerdict(tc.members)
			switch {
			case tc.wantState == "" && v != nil:
				t.Errorf("verdict %+v, want none", v)
			case tc.wantState != "" && v == nil:
				t.Errorf("no verdict, want %s", tc.wantState)
			case v != nil && (v.State != tc.wantState || !v.Since.Equal(t0.Add(tc.wantSince))):
				t.Errorf("verdict %s since %s, want %s since %s", v.State, v.Since, tc.wantState, t0.Add(tc.wantSince))
			}
		})
	}
}

func TestAggregate(t *testing.T) {
	cb := &resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Generation: 2}}
	if state, counts := aggregate(cb); state != "" || counts != nil {
		t.Errorf("no members: %q %+v", state, counts)
	}
	behind := member("d", closed, 0)
	behind.ConfigGeneration = 1
	rejected := member("e", closed, 0)
	rejected.ConfigGeneration, rejected.ConfigError = 2, "window: must be positive"
	latest := func(m resiliencev1alpha1.MemberStatus) resiliencev1alpha1.MemberStatus {
		m.ConfigGeneration = 2
		return m
	}
	cb.Status.Members = []resiliencev1alpha1.MemberStatus{
		latest(member("a", closed, 0)), latest(member("b", halfOpen, 0)), latest(member("c", open, 0)), behind, rejected,
	}
	state, counts := aggregate(cb)
	if state != open {
		t.Errorf("state %s, want the most severe, Open", state)
	}
	want := resiliencev1alpha1.MemberCounts{Reporting: 5, Closed: 3, Open: 1, HalfOpen: 1, OnLatestConfig: 3}
	if *counts != want {
		t.Errorf("counts %+v, want %+v", *counts, want)
	}

	cb.Spec.Scope = resiliencev1alpha1.ScopeFleet
	cb.Status.Members = []resiliencev1alpha1.MemberStatus{member("a", halfOpen, 40), member("b", closed, 50), member("c", open, 10)}
	if state, _ := aggregate(cb); state != closed {
		t.Errorf("fleet state %s, want the verdict (Closed: b closed last)", state)
	}
}

func TestOpenAndConfigAppliedConditions(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		members                []resiliencev1alpha1.MemberStatus
		open, applied          metav1.ConditionStatus
		openReason, appliedWhy string
	}{
		{"no members", nil, metav1.ConditionUnknown, metav1.ConditionUnknown, "NoMembers", "NoMembers"},
		{"closed, applied", []resiliencev1alpha1.MemberStatus{member("a", closed, 0)}, metav1.ConditionFalse, metav1.ConditionTrue, "CircuitClosed", "AllMembersApplied"},
		{"open", []resiliencev1alpha1.MemberStatus{member("a", closed, 0), member("b", open, 3)}, metav1.ConditionTrue, metav1.ConditionTrue, "CircuitOpen", "AllMembersApplied"},
		{"half-open", []resiliencev1alpha1.MemberStatus{member("a", halfOpen, 0)}, metav1.ConditionFalse, metav1.ConditionTrue, "CircuitHalfOpen", "AllMembersApplied"},
		{"behind", []resiliencev1alpha1.MemberStatus{{Pod: "a", State: closed, ConfigGeneration: 0}}, metav1.ConditionFalse, metav1.ConditionFalse, "CircuitClosed", "MembersBehind"},
		{"rejected", []resiliencev1alpha1.MemberStatus{{Pod: "a", State: closed, ConfigGeneration: 1, ConfigError: "bad"}}, metav1.ConditionFalse, metav1.ConditionFalse, "CircuitClosed", "MembersRejected"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cb := &resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Generation: 1}}
			cb.Status.Members = tc.members
			cb.Status.State, cb.Status.MemberCounts = aggregate(cb)
			setOpenCondition(cb)
			setConfigAppliedCondition(cb)
			o, a := cb.Status.Conditions[0], cb.Status.Conditions[1]
			if o.Status != tc.open || o.Reason != tc.openReason {
				t.Errorf("Open = %s/%s, want %s/%s", o.Status, o.Reason, tc.open, tc.openReason)
			}
			if a.Status != tc.applied || a.Reason != tc.appliedWhy {
				t.Errorf("ConfigApplied = %s/%s (%s), want %s/%s", a.Status, a.Reason, a.Message, tc.applied, tc.appliedWhy)
			}
		})
	}
}

func TestOpenedMessageNamesThePodAndTheEvidence(t *testing.T) {
	m := member("web-7d9f", open, 0)
	m.FailureRatePercent, m.Calls = ptr.To[int32](55), ptr.To[int64](40)
	adopted := member("adopted", open, 0) // same time, no evidence: it followed the fleet
	cb := &resiliencev1alpha1.CircuitBreaker{Status: resiliencev1alpha1.CircuitBreakerStatus{Members: []resiliencev1alpha1.MemberStatus{adopted, member("other", closed, 9), m}}}
	want := "Pod web-7d9f opened the circuit at 2026-11-29T12:00:00Z: 55% of 40 calls failed"
	if got := openedMessage(cb); got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
}
