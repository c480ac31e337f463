package controller

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/counting"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/kube"
)

func TestRenderEveryField(t *testing.T) {
	cb := &resiliencev1alpha1.CircuitBreaker{
		ObjectMeta: metav1.ObjectMeta{Name: "payments-api", Generation: 3, UID: "5f0c3a52-0d7e-4f57-9a8e-2b1d0c9e6f11"},
		Spec: resiliencev1alpha1.CircuitBreakerSpec{
			OpenTimeout:            &metav1.Duration{Duration: 45 * time.Second},
			Window:                 &metav1.Duration{Duration: 2 * time.Minute},
			FailureRatePercent:     ptr.To[int32](35),
			MinimumThroughput:      ptr.To[int32](7),
			SuccessThreshold:       ptr.To[int32](4),
			HalfOpenPermittedCalls: ptr.To[int32](3),
			Mode:                   resiliencev1alpha1.ModeForcedClosed,
			Scope:                  resiliencev1alpha1.ScopeFleet,
		},
	}
	verdict := &breakerconfig.Verdict{State: breakerconfig.StateOpen, Since: time.Date(2026, 11, 29, 21, 55, 51, 123_000_000, time.UTC)}
	c, err := render(cb, verdict, fleetCounts{})
	if err != nil {
		t.Fatal(err)
	}
	doc, err := breakerconfig.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	want := `{
  "name": "payments-api",
  "generation": 3,
  "uid": "5f0c3a52-0d7e-4f57-9a8e-2b1d0c9e6f11",
  "openTimeout": "45s",
  "window": "2m0s",
  "failureRatio": 0.35,
  "minimumThroughput": 7,
  "successThreshold": 4,
  "halfOpenPermittedCalls": 3,
  "mode": "ForcedClosed",
  "scope": "Fleet",
  "verdict": {
    "state": "Open",
    "since": "2026-11-29T21:55:51.123Z"
  }
}`
	if string(doc) != want {
		t.Errorf("rendered\n%s\nwant\n%s", doc, want)
	}
	// What the operator writes, the library reads back to the same policy.
	back, err := breakerconfig.Parse(doc)
	if err != nil {
		t.Fatalf("Parse(rendered): %v", err)
	}
	if !reflect.DeepEqual(back, c) {
		t.Errorf("round trip: got %+v, want %+v", back, c)
	}
}

// Only scope Fleet carries a verdict; scope Pod pods decide alone.
func TestRenderVerdictOnlyForFleet(t *testing.T) {
	verdict := &breakerconfig.Verdict{State: breakerconfig.StateOpen, Since: time.Now()}
	cb := &resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "x", UID: "u1"}}
	c, err := render(cb, verdict, fleetCounts{})
	if err != nil || c.Verdict != nil || c.UID != "u1" {
		t.Errorf("Pod scope: %+v, %v; want no verdict and the UID", c, err)
	}
	cb.Spec.Scope = resiliencev1alpha1.ScopeFleet
	if c, err := render(cb, verdict, fleetCounts{}); err != nil || c.Verdict != verdict {
		t.Errorf("Fleet scope: %+v, %v; want the verdict", c, err)
	}
}

// The rendered config carries the fleet verdict that the reports make.
func TestPlanConfigPublishesTheFleetVerdict(t *testing.T) {
	cb := *fleetBreaker(0)
	reports := namespaceReports{byBreaker: map[string][]counting.Entry{"b": entriesOf([]member{at("x", open, tripped, 5*time.Second), at("y", closed, started, 0)})}}
	plan := planConfig(t0, []resiliencev1alpha1.CircuitBreaker{cb}, nil, reports, nil)
	c, err := breakerconfig.Parse([]byte(plan.data["b.json"]))
	if err != nil {
		t.Fatal(err)
	}
	if c.Verdict == nil || c.Verdict.State != "Open" || !c.Verdict.Since.Equal(t0.Add(5*time.Second)) {
		t.Errorf("verdict %+v, want Open since t0+5s", c.Verdict)
	}
}

// A verdict whose start moved by less than retimeTolerance (one more pod's report of the
// same trip arriving) keeps the published start, and so changes nothing to publish; a
// move of the tolerance or more, or another state, is published.
func TestPlanConfigKeepsAVerdictsPublishedStart(t *testing.T) {
	cb := *fleetBreaker(0)
	planAt := func(cm *corev1.ConfigMap, ms ...member) configPlan {
		t.Helper()
		return planConfig(t0, []resiliencev1alpha1.CircuitBreaker{cb}, cm, namespaceReports{byBreaker: map[string][]counting.Entry{"b": entriesOf(ms)}}, nil)
	}
	first := planAt(nil, at("x", open, tripped, 5*time.Second))
	published := &corev1.ConfigMap{Data: first.data}
	verdictOf := func(p configPlan) *breakerconfig.Verdict {
		t.Helper()
		c, err := breakerconfig.Parse([]byte(p.data["b.json"]))
		if err != nil || c.Verdict == nil {
			t.Fatalf("no verdict in %q: %v", p.data["b.json"], err)
		}
		return c.Verdict
	}
	for _, tc := range []struct {
		name    string
		later   member
		changed bool
		since   time.Duration
	}{
		{"a pod's Open 10ms later", at("y", open, tripped, 5*time.Second+10*time.Millisecond), false, 5 * time.Second},
		{"a pod's Open 999ms later", at("y", open, tripped, 5*time.Second+999*time.Millisecond), false, 5 * time.Second},
		{"a pod's Open a second later", at("y", open, tripped, 6*time.Second), true, 6 * time.Second},
	} {
		p := planAt(published, at("x", open, tripped, 5*time.Second), tc.later)
		if got := p.outcomes[0].changed; got != tc.changed {
			t.Errorf("%s: changed %v, want %v", tc.name, got, tc.changed)
		}
		if v := verdictOf(p); !v.Since.Equal(t0.Add(tc.since)) {
			t.Errorf("%s: verdict since %v, want t0+%v", tc.name, v.Since, tc.since)
		}
	}
	// A later Open that is another open period (counted on by its pod) is news at once.
	again := at("y", open, tripped, 5*time.Second+10*time.Millisecond)
	again.entry.ConsecutiveOpens = 2
	if p := planAt(published, at("x", open, tripped, 5*time.Second), again); !p.outcomes[0].changed {
		t.Error("a verdict with another count was not published")
	}
}

func TestRenderRatioConversion(t *testing.T) {
	for percent, want := range map[int32]float64{1: 0.01, 33: 0.33, 50: 0.5, 99: 0.99, 100: 1} {
		cb := &resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "x"},
			Spec: resiliencev1alpha1.CircuitBreakerSpec{FailureRatePercent: ptr.To(percent)}}
		c, err := render(cb, nil, fleetCounts{})
		if err != nil {
			t.Fatalf("%d%%: %v", percent, err)
		}
		if c.FailureRatio != want {
			t.Errorf("%d%% rendered as ratio %v, want %v", percent, c.FailureRatio, want)
		}
	}
}

// An object stored without defaults (created before a default existed, or
// written around admission) renders with the documented defaults.
func TestRenderMissingFieldsGetDefaults(t *testing.T) {
	c, err := render(&resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "bare", Generation: 1}}, nil, fleetCounts{})
	if err != nil {
		t.Fatal(err)
	}
	want := breakerconfig.Config{
		Name: "bare", Generation: 1,
		Policy: breakerconfig.Policy{
			OpenTimeout: breakerconfig.Duration(30 * time.Second), Window: breakerconfig.Duration(10 * time.Second),
			FailureRatio: 0.5, MinimumThroughput: 20, SuccessThreshold: 2, HalfOpenPermittedCalls: 1,
		},
		Mode: "Enforce", Scope: "Pod",
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("got %+v, want %+v", c, want)
	}
}

func TestRenderRefusesWhatTheLibraryWould(t *testing.T) {
	for name, spec := range map[string]resiliencev1alpha1.CircuitBreakerSpec{
		"zero window":      {Window: &metav1.Duration{}},
		"negative timeout": {OpenTimeout: &metav1.Duration{Duration: -time.Second}},
		"ratio above 100%": {FailureRatePercent: ptr.To[int32](150)},
		"zero threshold":   {SuccessThreshold: ptr.To[int32](0)},
		"unknown mode":     {Mode: "Sometimes"},
		"unknown scope":    {Scope: "Galaxy"},
		"zero probe cap":   {HalfOpenPermittedCalls: ptr.To[int32](0)},
		"zero minimum":     {MinimumThroughput: ptr.To[int32](0)},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := render(&resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: spec}, nil, fleetCounts{})
			if err == nil {
				t.Fatal("rendered; want an error")
			}
			if !strings.HasPrefix(err.Error(), "spec") {
				t.Errorf("error %q does not start with the spec path", err)
			}
		})
	}
}

// A breaker that cannot be rendered keeps what was published for it; keys of
// no breaker are dropped.
func TestPlanConfigKeepsLastGoodAndDropsStrays(t *testing.T) {
	good := resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "good", Generation: 1}}
	bad := resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "bad", Generation: 2},
		Spec: resiliencev1alpha1.CircuitBreakerSpec{Mode: "Sometimes"}}
	plan := planConfig(t0, []resiliencev1alpha1.CircuitBreaker{good, bad}, &corev1.ConfigMap{Data: map[string]string{
		"bad.json":   `{"the":"last good"}`,
		"stray.json": "{}",
		"notes.txt":  "hand-written",
	}}, namespaceReports{}, nil)
	if _, ok := plan.data["good.json"]; !ok {
		t.Error("good breaker not published")
	}
	if got := plan.data["bad.json"]; got != `{"the":"last good"}` {
		t.Errorf("bad breaker's last good config replaced by %q", got)
	}
	if len(plan.data) != 2 {
		t.Errorf("published keys %v, want only good.json and bad.json", plan.data)
	}
	if len(plan.outcomes) != 2 || plan.outcomes[0].err != nil || !plan.outcomes[0].changed {
		t.Errorf("good outcome = %+v", plan.outcomes[0])
	}
	if err := plan.outcomes[1].err; err == nil || !strings.Contains(strings.ToLower(err.Error()), "mode") {
		t.Errorf("bad outcome error = %v, want one naming mode", err)
	}
}

func TestRenderRefusesANameNoKeyHolds(t *testing.T) {
	_, err := render(&resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: strings.Repeat("n", breakerconfig.MaxKeyNameLength+1)}}, nil, fleetCounts{})
	if err == nil || !strings.HasPrefix(err.Error(), "metadata.name") {
		t.Errorf("error %v, want one naming metadata.name", err)
	}
	if _, err := render(&resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: strings.Repeat("n", breakerconfig.MaxKeyNameLength)}}, nil, fleetCounts{}); err != nil {
		t.Errorf("the longest name that fits: %v", err)
	}
}

func TestSetReadyCondition(t *testing.T) {
	cb := &resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Generation: 4}}
	cb.Status.ObservedGeneration = 4
	setReadyCondition(cb, nil)
	stampObservedGeneration(cb)
	c := cb.Status.Conditions[0]
	if c.Type != "Ready" || c.Status != metav1.ConditionTrue || c.Reason != "ConfigPublished" || c.ObservedGeneration != 4 {
		t.Errorf("published: %+v", c)
	}
	setReadyCondition(cb, errors.New("spec: mode: unknown"))
	c = cb.Status.Conditions[0]
	if len(cb.Status.Conditions) != 1 || c.Status != metav1.ConditionFalse || c.Reason != "ConfigInvalid" || c.Message != "spec: mode: unknown" {
		t.Errorf("invalid: %+v", cb.Status.Conditions)
	}
}

// The fields of docs/design.md §5.13 render as §4 shows them, among the policy's fields,
// and read back to the same config.
func TestRenderSlowCallsAndBackoff(t *testing.T) {
	cb := &resiliencev1alpha1.CircuitBreaker{
		ObjectMeta: metav1.ObjectMeta{Name: "search", Generation: 2},
		Spec: resiliencev1alpha1.CircuitBreakerSpec{
			OpenTimeout:         &metav1.Duration{Duration: 10 * time.Second},
			SlowCallDuration:    &metav1.Duration{Duration: 1500 * time.Millisecond},
			SlowCallRatePercent: ptr.To[int32](80),
			MaxOpenTimeout:      &metav1.Duration{Duration: 5 * time.Minute},
			Scope:               resiliencev1alpha1.ScopeFleet,
		},
	}
	verdict := &breakerconfig.Verdict{State: breakerconfig.StateOpen, Since: time.Date(2026, 11, 29, 21, 55, 51, 123_000_000, time.UTC),
		ConsecutiveOpens: 3, OpenTimeout: breakerconfig.Duration(40 * time.Second)}
	c, err := render(cb, verdict, fleetCounts{})
	if err != nil {
		t.Fatal(err)
	}
	doc, err := breakerconfig.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	want := `{
  "name": "search",
  "generation": 2,
  "openTimeout": "10s",
  "window": "10s",
  "failureRatio": 0.5,
  "minimumThroughput": 20,
  "successThreshold": 2,
  "halfOpenPermittedCalls": 1,
  "slowCallDuration": "1.5s",
  "slowCallRatio": 0.8,
  "maxOpenTimeout": "5m0s",
  "mode": "Enforce",
  "scope": "Fleet",
  "verdict": {
    "state": "Open",
    "since": "2026-11-29T21:55:51.123Z",
    "consecutiveOpens": 3,
    "openTimeout": "40s"
  }
}`
	if string(doc) != want {
		t.Errorf("rendered\n%s\nwant\n%s", doc, want)
	}
	back, err := breakerconfig.Parse(doc)
	if err != nil {
		t.Fatalf("Parse(rendered): %v", err)
	}
	if !reflect.DeepEqual(back, c) {
		t.Errorf("round trip: got %+v, want %+v", back, c)
	}
	p, err := kube.PolicyOf(back)
	if err != nil || p.SlowCallDuration != 1500*time.Millisecond || p.SlowCallRatio != 0.8 || p.MaxOpenTimeout != 5*time.Minute {
		t.Errorf("policy %+v, %v", p, err)
	}
}

// slowCallRatio goes with slowCallDuration only: the CRD defaults slowCallRatePercent to
// 100 on every object, and a ratio with no duration would read as a setting in force.
func TestRenderSlowCallRatioOnlyWithItsDuration(t *testing.T) {
	for _, tc := range []struct {
		name      string
		spec      resiliencev1alpha1.CircuitBreakerSpec
		wantDur   time.Duration
		wantRatio float64
	}{
		{"neither", resiliencev1alpha1.CircuitBreakerSpec{}, 0, 0},
		{"the defaulted rate alone", resiliencev1alpha1.CircuitBreakerSpec{SlowCallRatePercent: ptr.To[int32](100)}, 0, 0},
		{"a rate alone", resiliencev1alpha1.CircuitBreakerSpec{SlowCallRatePercent: ptr.To[int32](30)}, 0, 0},
		{"a duration, the rate unset (stored before its default)", resiliencev1alpha1.CircuitBreakerSpec{SlowCallDuration: &metav1.Duration{Duration: time.Second}}, time.Second, 1},
		{"both", resiliencev1alpha1.CircuitBreakerSpec{SlowCallDuration: &metav1.Duration{Duration: 5 * time.Millisecond}, SlowCallRatePercent: ptr.To[int32](1)}, 5 * time.Millisecond, 0.01},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := render(&resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: tc.spec}, nil, fleetCounts{})
			if err != nil {
				t.Fatal(err)
			}
			if time.Duration(c.SlowCallDuration) != tc.wantDur || c.SlowCallRatio != tc.wantRatio || c.MaxOpenTimeout != 0 {
				t.Errorf("slowCallDuration %s slowCallRatio %v maxOpenTimeout %s, want %s %v 0s",
					time.Duration(c.SlowCallDuration), c.SlowCallRatio, time.Duration(c.MaxOpenTimeout), tc.wantDur, tc.wantRatio)
			}
			doc, _ := breakerconfig.Marshal(c)
			if tc.wantDur == 0 && (strings.Contains(string(doc), "slowCall") || strings.Contains(string(doc), "maxOpenTimeout")) {
				t.Errorf("rendered %s, want no slow-call or backoff fields", doc)
			}
		})
	}
}

// What the CRD refuses but an object stored around admission may hold is refused by the
// render, naming the field, and never published.
func TestRenderRefusesABackoffBelowOpenTimeout(t *testing.T) {
	_, err := render(&resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: resiliencev1alpha1.CircuitBreakerSpec{
		OpenTimeout: &metav1.Duration{Duration: time.Minute}, MaxOpenTimeout: &metav1.Duration{Duration: time.Second}}}, nil, fleetCounts{})
	if err == nil || !strings.HasPrefix(err.Error(), "spec") || !strings.Contains(err.Error(), "maxOpenTimeout") {
		t.Errorf("error %v, want one naming spec and maxOpenTimeout", err)
	}
	_, err = render(&resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: resiliencev1alpha1.CircuitBreakerSpec{
		SlowCallDuration: &metav1.Duration{Duration: -time.Second}}}, nil, fleetCounts{})
	if err == nil || !strings.Contains(err.Error(), "slowCallDuration") {
		t.Errorf("error %v, want one naming slowCallDuration", err)
	}
}
