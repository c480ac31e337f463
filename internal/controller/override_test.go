package controller

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

func overridden(until time.Time, who string) *resiliencev1alpha1.CircuitBreaker {
	cb := &resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "b", Generation: 1}}
	cb.Spec.Mode = resiliencev1alpha1.ModeEnforce
	cb.Spec.Override = &resiliencev1alpha1.Override{Mode: resiliencev1alpha1.ModeForcedOpen, Until: metav1.NewTime(until), Reason: "INC-7"}
	if who != "" {
		cb.Annotations = map[string]string{resiliencev1alpha1.AnnotationOverriddenBy: who}
	}
	return cb
}

func renderedMode(t *testing.T, cb *resiliencev1alpha1.CircuitBreaker, now time.Time) (string, outcome) {
	t.Helper()
	plan := planConfig(now, []resiliencev1alpha1.CircuitBreaker{*cb}, nil, namespaceReports{}, nil)
	c, err := breakerconfig.Parse([]byte(plan.data["b.json"]))
	if err != nil {
		t.Fatal(err)
	}
	return c.Mode, plan.outcomes[0]
}

// The rendered mode is the override's while now is before until, spec.mode's from until on,
// and the plan says how long until the next change.
func TestPlanConfigRendersTheOverrideUntilItEnds(t *testing.T) {
	until := t0.Add(time.Minute)
	cb := overridden(until, "alice")
	for _, tc := range []struct {
		now       time.Time
		mode      string
		remaining time.Duration
	}{
		{t0, "ForcedOpen", time.Minute},
		{until.Add(-time.Millisecond), "ForcedOpen", time.Millisecond},
		{until, "Enforce", 0},
		{until.Add(time.Hour), "Enforce", 0},
	} {
		mode, o := renderedMode(t, cb, tc.now)
		if mode != tc.mode || o.override.remaining != tc.remaining || nextExpiry([]outcome{o}) != tc.remaining {
			t.Errorf("at until%+v: mode %s, remaining %v; want %s, %v", tc.now.Sub(until), mode, o.override.remaining, tc.mode, tc.remaining)
		}
	}
	cb.Spec.Override = nil
	if mode, o := renderedMode(t, cb, t0); mode != "Enforce" || nextExpiry([]outcome{o}) != 0 {
		t.Errorf("no override: %s, %v", mode, o.override)
	}
}

func TestNextExpiryIsTheEarliest(t *testing.T) {
	a, b, none := overridden(t0.Add(time.Hour), ""), overridden(t0.Add(time.Minute), ""), overridden(t0.Add(-time.Minute), "")
	outcomes := []outcome{{override: overrideAt(a, t0, t0)}, {override: overrideAt(b, t0, t0)}, {override: overrideAt(none, t0, t0)}}
	if got := nextExpiry(outcomes); got != time.Minute {
		t.Errorf("next expiry %v, want 1m", got)
	}
	if earliest(0, 3) != 3 || earliest(3, 0) != 3 || earliest(2, 3) != 2 || earliest(3, 2) != 2 {
		t.Error("earliest")
	}
}

func TestSetOverriddenCondition(t *testing.T) {
	until := t0.Add(time.Minute)
	for _, tc := range []struct {
		name    string
		cb      *resiliencev1alpha1.CircuitBreaker
		now     time.Time
		status  metav1.ConditionStatus
		reason  string
		message string
	}{
		{"in force", overridden(until, "alice"), t0, metav1.ConditionTrue, "OverrideActive",
			"Held ForcedOpen until 2026-11-29T12:01:00Z by alice: INC-7"},
		{"in force, set around the webhook", overridden(until, ""), t0, metav1.ConditionTrue, "OverrideActive",
			"Held ForcedOpen until 2026-11-29T12:01:00Z by an unrecorded user (no fusebox.dev/overridden-by annotation): INC-7"},
		{"ran out", overridden(until, "alice"), until, metav1.ConditionFalse, "OverrideExpired",
			"The ForcedOpen override ended at 2026-11-29T12:01:00Z; spec.mode (Enforce) applies again (it was set by alice: INC-7)"},
		{"none", &resiliencev1alpha1.CircuitBreaker{}, t0, metav1.ConditionFalse, "NoOverride", "No override is set; spec.mode (Enforce) applies"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setOverriddenCondition(tc.cb, overrideAt(tc.cb, tc.now, t0))
			c := meta.FindStatusCondition(tc.cb.Status.Conditions, resiliencev1alpha1.ConditionOverridden)
			if c == nil || c.Status != tc.status || c.Reason != tc.reason || c.Message != tc.message {
				t.Errorf("condition %+v\nwant %s %s %q", c, tc.status, tc.reason, tc.message)
			}
		})
	}
}

// Each Event follows from the stored condition and the desired one alone.
func TestOverrideEvent(t *testing.T) {
	until := t0.Add(time.Minute)
	at := func(cb *resiliencev1alpha1.CircuitBreaker, now time.Time) *resiliencev1alpha1.CircuitBreaker {
		cb = cb.DeepCopy()
		setOverriddenCondition(cb, overrideAt(cb, now, t0))
		return cb
	}
	active := at(overridden(until, "alice"), t0)
	none := at(&resiliencev1alpha1.CircuitBreaker{}, t0)
	extended := overridden(until.Add(time.Hour), "bob")
	extended.Status = active.Status
	removed := active.DeepCopy()
	removed.Spec.Override = nil
	movedBack := active.DeepCopy()
	movedBack.Spec.Override.Until = metav1.NewTime(t0.Add(-time.Second))

	for _, tc := range []struct {
		name            string
		stored, desired *resiliencev1alpha1.CircuitBreaker
		want            string
	}{
		{"a new override starts", none, at(overridden(until, "alice"), t0), "OverrideStarted"},
		{"a first status with an override in force", &resiliencev1alpha1.CircuitBreaker{}, at(overridden(until, "alice"), t0), "OverrideStarted"},
		{"the same override again", active, at(active, t0.Add(time.Second)), ""},
		{"a changed override starts anew", active, at(extended, t0), "OverrideStarted"},
		{"the override runs out", active, at(active, until), "OverrideExpired"},
		{"an expired override stays expired", at(active, until), at(active, until.Add(time.Hour)), ""},
		{"the override is removed", active, at(removed, t0), "OverrideCancelled"},
		{"until moved into the past", active, at(movedBack, t0), "OverrideCancelled"},
		{"an override first seen after it ended", none, at(overridden(until, "alice"), until), ""},
		{"no override, still none", none, at(none, t0), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reason, _, message, ok := overrideEvent(tc.stored, tc.desired, overrideAt(tc.desired, t0, t0))
			if reason != tc.want || ok != (tc.want != "") {
				t.Errorf("event %q (%v), want %q", reason, ok, tc.want)
			}
			if ok && message == "" {
				t.Error("event without a message")
			}
		})
	}
}
