package kube

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakertest"
	"github.com/fusebox-dev/fusebox/pkg/breaker/observe"
	"github.com/fusebox-dev/fusebox/pkg/breaker/registry"
)

func TestReportEntry(t *testing.T) {
	since := time.Date(2026, 3, 4, 5, 6, 7, 891_000_000, time.UTC)
	long := strings.Repeat("é", 600) // 1200 bytes
	for _, tc := range []struct {
		name      string
		m         member
		wantState string
		wantRate  *int32
		wantCalls *int64
	}{
		{"closed without calls", member{state: breaker.Closed, since: since, reason: breakerconfig.ReasonStarted}, "Closed", nil, nil},
		{"open, two of three failed", member{state: breaker.Open, since: since, calls: 3, failures: 2, reason: breakerconfig.ReasonTripped}, "Open", ptr[int32](67), ptr[int64](3)},
		{"open, one of three failed", member{state: breaker.Open, since: since, calls: 3, failures: 1, reason: breakerconfig.ReasonTripped}, "Open", ptr[int32](33), ptr[int64](3)},
		{"half-open", member{state: breaker.HalfOpen, since: since, calls: 20, failures: 20, reason: breakerconfig.ReasonTimedOut}, "HalfOpen", ptr[int32](100), ptr[int64](20)},
		{"long refusal", member{state: breaker.Closed, since: since, configErr: truncate(long, maxConfigError), generation: 4, reason: breakerconfig.ReasonStarted}, "Closed", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := reportEntry("payments", tc.m)
			if e.Name != "payments" || e.State != tc.wantState || !e.Since.Equal(since) || e.Reason != tc.m.reason || e.ConfigGeneration != tc.m.generation {
				t.Errorf("got %+v", e)
			}
			if !eqPtr(e.FailureRatePercent, tc.wantRate) || !eqPtr(e.Calls, tc.wantCalls) {
				t.Errorf("rate %v calls %v, want %v %v", deref(e.FailureRatePercent), deref(e.Calls), deref(tc.wantRate), deref(tc.wantCalls))
			}
			if n := len([]rune(e.ConfigError)); n > breakerconfig.MaxConfigErrorSize {
				t.Errorf("configError of %d characters, over the CRD's %d", n, breakerconfig.MaxConfigErrorSize)
			}
			if !strings.HasPrefix(long, strings.TrimSuffix(e.ConfigError, "…")) {
				t.Errorf("configError cut inside a character: %q", e.ConfigError)
			}
		})
	}
}

// TestReasonOf: how each transition is reported, and which of them the fleet counts
// (docs/design.md §5.12).
func TestReasonOf(t *testing.T) {
	for _, tc := range []struct {
		to     breaker.State
		reason string
		want   string
		earned bool
	}{
		{breaker.Open, breakerconfig.ReasonTripped, breakerconfig.ReasonTripped, true},
		{breaker.Open, breakerconfig.ReasonProbeFailed, breakerconfig.ReasonProbeFailed, true},
		{breaker.Closed, breakerconfig.ReasonProbesSucceeded, breakerconfig.ReasonProbesSucceeded, true},
		{breaker.Open, breakerconfig.ReasonManual, breakerconfig.ReasonManual, true},
		{breaker.HalfOpen, breakerconfig.ReasonTimedOut, breakerconfig.ReasonTimedOut, false},
		{breaker.Open, breakerconfig.ReasonTimedOut, breakerconfig.ReasonTimedOut, false},
		{breaker.Open, breakerconfig.ReasonAdopted, breakerconfig.ReasonAdopted, false},
		{breaker.Closed, breakerconfig.ReasonAdopted, breakerconfig.ReasonAdopted, false},
		{breaker.Open, breakerconfig.ReasonForced, breakerconfig.ReasonForced, false},
		{breaker.Closed, breakerconfig.ReasonForced, breakerconfig.ReasonForced, false},
		// A reason a newer breaker package may add is not evidence until it is named.
		{breaker.Open, "Invented", breakerconfig.ReasonTimedOut, false},
	} {
		got := reasonOf(observe.Transition{To: tc.to, Reason: tc.reason})
		if got != tc.want {
			t.Errorf("→ %v by %q: reason %s, want %s", tc.to, tc.reason, got, tc.want)
		}
		if e := breakerconfig.Earned(wireState(tc.to), got); e != tc.earned {
			t.Errorf("→ %v by %q (%s): earned %v, want %v", tc.to, tc.reason, got, e, tc.earned)
		}
	}
}

func ptr[T any](v T) *T { return &v }

func eqPtr[T comparable](a, b *T) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestReporterOrdersDeliveries: transitions delivered out of order (from different
// goroutines) do not roll the entry back, and nothing is to be written before the breaker
// is configured.
func TestReporterOrdersDeliveries(t *testing.T) {
	r := &reporter{wake: make(chan struct{}, 1), entries: map[string]*entry{}}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r.OnTransition(observe.Transition{Breaker: "x", From: breaker.Open, To: breaker.HalfOpen, At: at.Add(time.Minute), Period: 2})
	r.OnTransition(observe.Transition{Breaker: "x", From: breaker.Closed, To: breaker.Open, At: at, Period: 1,
		Counts: breaker.Counts{Calls: 4, Failures: 4}})
	if got := r.entries["x"].want; got.state != breaker.HalfOpen || !got.since.Equal(at.Add(time.Minute)) {
		t.Errorf("entry %+v, want the later half-open", got)
	}
	if names, _, _ := r.pending(); len(names) != 0 || len(r.wake) != 0 {
		t.Error("an unconfigured breaker is to be written")
	}

	// An adopted verdict carries no local evidence.
	r.OnTransition(observe.Transition{Breaker: "x", From: breaker.HalfOpen, To: breaker.Open, At: at, Period: 3,
		Reason: breakerconfig.ReasonAdopted, Counts: breaker.Counts{Calls: 9, Failures: 1}})
	if got := r.entries["x"].want; got.calls != 0 {
		t.Errorf("adopted transition reported %d calls", got.calls)
	}
}

func TestConnectRefusesIncompleteOptions(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{}, "ConfigDir"},
		{Options{Config: &rest.Config{Host: "https://127.0.0.1:1"}, Pod: "p"}, "Namespace"},
		{Options{Config: &rest.Config{Host: "https://127.0.0.1:1"}, Namespace: "n"}, "Pod"},
		{Options{ConfigDir: t.TempDir(), DefaultPolicy: breaker.Policy{Window: -1}}, "default policy"},
	} {
		tc.o.Logger = quiet
		_, err := Connect(context.Background(), tc.o)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Connect(%+v): %v, want an error naming %s", tc.o, err, tc.want)
		}
	}
}

func TestOptionsFromEnvironment(t *testing.T) {
	// Outside a cluster: no in-cluster config.
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")

	t.Setenv(EnvConfigDir, "")
	t.Setenv(EnvNamespace, "shop")
	t.Setenv(EnvPodUID, "0d3c7a52-5a4b-4d5e-9a1c-6f2e8b7c9d01")
	t.Setenv(EnvPodName, "")
	if _, err := OptionsFromEnvironment(); err == nil || !strings.Contains(err.Error(), "POD_NAME is not set") {
		t.Errorf("without POD_NAME: %v", err)
	}
	t.Setenv(EnvPodName, "web-1")
	t.Setenv(EnvPodUID, "")
	// The pod learns its UID from the downward API only: it has no access to Pods.
	if _, err := OptionsFromEnvironment(); err == nil || !strings.Contains(err.Error(), "POD_UID is not set") || !strings.Contains(err.Error(), "metadata.uid") {
		t.Errorf("without POD_UID: %v", err)
	}
	t.Setenv(EnvPodName, "")
	if _, err := OptionsFromEnvironment(); err == nil || !strings.Contains(err.Error(), "POD_NAME and POD_UID are not set") {
		t.Errorf("without POD_NAME and POD_UID: %v", err)
	}
	t.Setenv(EnvPodName, "web-1")
	t.Setenv(EnvPodUID, "0d3c7a52-5a4b-4d5e-9a1c-6f2e8b7c9d01")
	if _, err := OptionsFromEnvironment(); err == nil || !strings.Contains(err.Error(), "in-cluster") {
		t.Errorf("without in-cluster config: %v", err)
	}

	t.Setenv(EnvConfigDir, "/etc/fusebox")
	o, err := OptionsFromEnvironment()
	if err != nil {
		t.Fatal(err)
	}
	if o.ConfigDir != "/etc/fusebox" || o.Config != nil || !strings.Contains(o.whyNoReport, "in-cluster") {
		t.Errorf("file source without API access: %+v", o)
	}
	// Without POD_UID, a pod that reads the mounted config runs its breakers and does not
	// report, saying why.
	t.Setenv(EnvPodUID, "")
	if o, err = OptionsFromEnvironment(); err != nil {
		t.Fatal(err)
	}
	if o.Config != nil || o.whyNoReport != "POD_UID is not set" {
		t.Errorf("file source without POD_UID: %+v, want reporting off because POD_UID is not set", o)
	}
}

func TestConfigNameMustMatchKey(t *testing.T) {
	doc := `{"name": "other", "generation": 1, "openTimeout": "30s", "window": "10s", "failureRatio": 0.5,
		"minimumThroughput": 20, "successThreshold": 2, "halfOpenPermittedCalls": 1, "mode": "Enforce", "scope": "Pod"}`
	if _, err := parse("mine", doc); err == nil || !strings.Contains(err.Error(), "mine.json") {
		t.Errorf("parse: %v, want a refusal naming the key", err)
	}
}

// TestReportEntryFromTransition: the figures of a hand-built Transition as the report
// spells them (trigger, slow-call rate, backed-off open period).
func TestReportEntryFromTransition(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 891_000_000, time.UTC)
	for _, tc := range []struct {
		name       string
		t          observe.Transition
		slowJudged bool
		want       breakerconfig.ReportEntry
	}{
		{"failure rate opened it", observe.Transition{From: breaker.Closed, To: breaker.Open, Reason: breakerconfig.ReasonTripped, Trigger: breakerconfig.TriggerFailureRate,
			Counts: breaker.Counts{Calls: 20, Failures: 12, Slow: 5}, ConsecutiveOpens: 1, OpenTimeout: 30 * time.Second}, true,
			breakerconfig.ReportEntry{State: "Open", Reason: "Tripped", Calls: ptr[int64](20), FailureRatePercent: ptr[int32](60), SlowCallRatePercent: ptr[int32](25),
				Trigger: "FailureRate", ConsecutiveOpens: 1, OpenTimeout: ptr(breakerconfig.Duration(30 * time.Second))}},
		{"slow calls opened it", observe.Transition{From: breaker.Closed, To: breaker.Open, Reason: breakerconfig.ReasonTripped, Trigger: breakerconfig.TriggerSlowCallRate,
			Counts: breaker.Counts{Calls: 10, Failures: 1, Slow: 9}, ConsecutiveOpens: 1, OpenTimeout: time.Minute}, true,
			breakerconfig.ReportEntry{State: "Open", Reason: "Tripped", Calls: ptr[int64](10), FailureRatePercent: ptr[int32](10), SlowCallRatePercent: ptr[int32](90),
				Trigger: "SlowCallRate", ConsecutiveOpens: 1, OpenTimeout: ptr(breakerconfig.Duration(time.Minute))}},
		{"a failed probe, third open in a row", observe.Transition{From: breaker.HalfOpen, To: breaker.Open, Reason: breakerconfig.ReasonProbeFailed, Trigger: breakerconfig.TriggerFailedProbe,
			Counts: breaker.Counts{Calls: 1, Failures: 1}, ConsecutiveOpens: 3, OpenTimeout: 2 * time.Minute}, false,
			breakerconfig.ReportEntry{State: "Open", Reason: "ProbeFailed", Calls: ptr[int64](1), FailureRatePercent: ptr[int32](100),
				Trigger: "FailedProbe", ConsecutiveOpens: 3, OpenTimeout: ptr(breakerconfig.Duration(2 * time.Minute))}},
		{"a slow probe", observe.Transition{From: breaker.HalfOpen, To: breaker.Open, Reason: breakerconfig.ReasonProbeFailed, Trigger: breakerconfig.TriggerSlowProbe,
			Counts: breaker.Counts{Calls: 1, Slow: 1}, ConsecutiveOpens: 2, OpenTimeout: time.Minute}, true,
			breakerconfig.ReportEntry{State: "Open", Reason: "ProbeFailed", Calls: ptr[int64](1), FailureRatePercent: ptr[int32](0), SlowCallRatePercent: ptr[int32](100),
				Trigger: "SlowProbe", ConsecutiveOpens: 2, OpenTimeout: ptr(breakerconfig.Duration(time.Minute))}},
		{"Trip has no trigger", observe.Transition{From: breaker.Closed, To: breaker.Open, Reason: breakerconfig.ReasonManual, Trigger: breakerconfig.TriggerFailureRate,
			ConsecutiveOpens: 1, OpenTimeout: 30 * time.Second}, false,
			breakerconfig.ReportEntry{State: "Open", Reason: "Manual", ConsecutiveOpens: 1, OpenTimeout: ptr(breakerconfig.Duration(30 * time.Second))}},
		{"half-open keeps the period that ended", observe.Transition{From: breaker.Open, To: breaker.HalfOpen, Reason: breakerconfig.ReasonTimedOut,
			Counts: breaker.Counts{Calls: 20, Failures: 20}, ConsecutiveOpens: 2, OpenTimeout: time.Minute}, false,
			breakerconfig.ReportEntry{State: "HalfOpen", Reason: "TimedOut", Calls: ptr[int64](20), FailureRatePercent: ptr[int32](100),
				ConsecutiveOpens: 2, OpenTimeout: ptr(breakerconfig.Duration(time.Minute))}},
		{"closing resets the run of opens", observe.Transition{From: breaker.HalfOpen, To: breaker.Closed, Reason: breakerconfig.ReasonProbesSucceeded,
			Counts: breaker.Counts{Calls: 2, Successes: 2}, ConsecutiveOpens: 3, OpenTimeout: time.Minute}, true,
			breakerconfig.ReportEntry{State: "Closed", Reason: "ProbesSucceeded", Calls: ptr[int64](2), FailureRatePercent: ptr[int32](0), SlowCallRatePercent: ptr[int32](0)}},
		{"an adopted verdict carries no local figures", observe.Transition{From: breaker.Closed, To: breaker.Open, Reason: breakerconfig.ReasonAdopted,
			Counts: breaker.Counts{Calls: 9, Failures: 1, Slow: 2}, ConsecutiveOpens: 2, OpenTimeout: time.Minute}, true,
			breakerconfig.ReportEntry{State: "Open", Reason: "Adopted", ConsecutiveOpens: 2, OpenTimeout: ptr(breakerconfig.Duration(time.Minute))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.t.At = at
			m := member{slowJudged: tc.slowJudged}
			m.setTransition(tc.t)
			got := reportEntry("payments", m)
			tc.want.Name, tc.want.Since = "payments", breakerconfig.NewTime(at)
			gotJSON, _ := json.Marshal(got)
			wantJSON, _ := json.Marshal(tc.want)
			if string(gotJSON) != string(wantJSON) {
				t.Errorf("entry\n got %s\nwant %s", gotJSON, wantJSON)
			}
		})
	}
}

// TestTriggerOf: a trigger is reported only for an open on calls, and only as the report
// spells it.
func TestTriggerOf(t *testing.T) {
	for _, tc := range []struct {
		reason, trigger, want string
	}{
		{breakerconfig.ReasonTripped, breakerconfig.TriggerFailureRate, breakerconfig.TriggerFailureRate},
		{breakerconfig.ReasonTripped, breakerconfig.TriggerSlowCallRate, breakerconfig.TriggerSlowCallRate},
		{breakerconfig.ReasonProbeFailed, breakerconfig.TriggerFailedProbe, breakerconfig.TriggerFailedProbe},
		{breakerconfig.ReasonProbeFailed, breakerconfig.TriggerSlowProbe, breakerconfig.TriggerSlowProbe},
		{breakerconfig.ReasonManual, breakerconfig.TriggerFailureRate, ""},
		{breakerconfig.ReasonTripped, "Invented", ""},
	} {
		if got := triggerOf(observe.Transition{To: breaker.Open, Reason: tc.reason, Trigger: tc.trigger}); got != tc.want {
			t.Errorf("%s by %s: %q, want %q", tc.reason, tc.trigger, got, tc.want)
		}
	}
}

// TestReporterGroup: a Group is one entry, computed from its summary, rewritten only when
// the summary changes; its members' transitions leave no entries of their own.
func TestReporterGroup(t *testing.T) {
	clock := breakertest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	r := &reporter{wake: make(chan struct{}, 1), entries: map[string]*entry{}}
	p := breaker.DefaultPolicy()
	p.MinimumThroughput = 2
	g, err := registry.NewGroup("hosts", p, breaker.WithClock(clock), breaker.WithObserver(r))
	if err != nil {
		t.Fatal(err)
	}
	r.configureGroup("hosts", g, p, 4, "")
	names, ms, dirty := r.pending()
	if !dirty || len(names) != 1 || names[0] != "hosts" {
		t.Fatalf("pending %v %v", names, dirty)
	}
	e := reportEntry(names[0], ms[0])
	if e.State != "Closed" || e.Reason != "Started" || e.Keys == nil || !reflect.DeepEqual(*e.Keys, breakerconfig.KeySummary{}) || e.ConfigGeneration != 4 {
		t.Fatalf("empty Group's entry %+v keys %+v", e, e.Keys)
	}
	r.markWritten(names, ms)

	fail := func(context.Context) error { return errors.New("down") }
	for _, k := range []string{"a.example", "b.example", "c.example"} {
		g.Get(k)
	}
	_, _, dirty = r.pending()
	if !dirty {
		t.Fatal("three new keys did not change the report")
	}
	for range 2 {
		_ = g.Get("b.example").Execute(context.Background(), fail)
	}
	if len(r.entries) != 1 {
		t.Errorf("entries %v: a member's transition made one of its own", slices.Collect(maps.Keys(r.entries)))
	}
	if len(r.wake) != 1 {
		t.Error("a member's transition did not wake the writer")
	}
	names, ms, _ = r.pending()
	e = reportEntry(names[0], ms[0])
	if e.State != "Open" || e.Reason != "Tripped" || !e.Since.Equal(clock.Now()) || *e.Calls != 2 || *e.FailureRatePercent != 100 {
		t.Errorf("entry %+v", e)
	}
	if want := (breakerconfig.KeySummary{Keys: 3, Open: 1, Worst: []string{"b.example"}}); !reflect.DeepEqual(*e.Keys, want) {
		t.Errorf("keys %+v, want %+v", *e.Keys, want)
	}
	r.markWritten(names, ms)
	if _, _, dirty := r.pending(); dirty {
		t.Error("an unchanged Group is to be written again")
	}
	g.Get("a.example") // a use changes no summary
	if _, _, dirty := r.pending(); dirty {
		t.Error("using a key rewrote the report")
	}
	clock.Advance(p.OpenTimeout)
	names, ms, dirty = r.pending()
	if e := reportEntry(names[0], ms[0]); !dirty || e.State != "HalfOpen" || e.Reason != "TimedOut" || e.Keys.HalfOpen != 1 {
		t.Errorf("after the open period: %v %+v", dirty, e)
	}
}

// TestReporterOpenPeriod: a breaker's backed-off open period reaches its entry, and
// configuring the breaker again (every config apply does) keeps what the transition said.
func TestReporterOpenPeriod(t *testing.T) {
	clock := breakertest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	r := &reporter{wake: make(chan struct{}, 1), entries: map[string]*entry{}}
	p := breaker.DefaultPolicy()
	p.MaxOpenTimeout = 4 * p.OpenTimeout
	b, err := breaker.New("payments", p, breaker.WithClock(clock), breaker.WithObserver(r))
	if err != nil {
		t.Fatal(err)
	}
	r.configure(b, 1, "", sampled{})
	entryNow := func() breakerconfig.ReportEntry {
		t.Helper()
		r.configure(b, 1, "", sampled{})
		names, ms, _ := r.pending()
		if len(names) != 1 {
			t.Fatalf("entries %v", names)
		}
		return reportEntry(names[0], ms[0])
	}
	b.Trip()
	clock.Advance(p.OpenTimeout)
	if s := b.State(); s != breaker.HalfOpen {
		t.Fatalf("state %v", s)
	}
	b.Trip() // the second open period in a row: backed off to twice OpenTimeout
	e := entryNow()
	if e.ConsecutiveOpens != 2 || e.OpenTimeout == nil || time.Duration(*e.OpenTimeout) != 2*p.OpenTimeout {
		t.Fatalf("open entry: consecutiveOpens %d openTimeout %v", e.ConsecutiveOpens, deref(e.OpenTimeout))
	}
	clock.Advance(2 * p.OpenTimeout)
	b.State()
	e = entryNow()
	if e.State != "HalfOpen" || e.ConsecutiveOpens != 2 || e.OpenTimeout == nil || time.Duration(*e.OpenTimeout) != 2*p.OpenTimeout {
		t.Errorf("half-open entry: %s consecutiveOpens %d openTimeout %v, want the period that ended", e.State, e.ConsecutiveOpens, deref(e.OpenTimeout))
	}
}

// TestFleetVerdictCarriesItsPeriod: the open period the operator renders with a fleet
// verdict reaches the breaker, and a new period of the same open verdict is news.
func TestFleetVerdictCarriesItsPeriod(t *testing.T) {
	since := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	c := &breakerconfig.Config{Name: "b", Scope: breakerconfig.ScopeFleet, Verdict: &breakerconfig.Verdict{
		State: breakerconfig.StateOpen, Since: since, ConsecutiveOpens: 3, OpenTimeout: breakerconfig.Duration(2 * time.Minute)}}
	v, ok := fleetVerdict(c)
	if !ok || v.State != breaker.Open || !v.Since.Equal(since) || v.ConsecutiveOpens != 3 || v.OpenTimeout != 2*time.Minute {
		t.Fatalf("fleetVerdict = %+v, %v", v, ok)
	}
	next := v
	next.ConsecutiveOpens, next.OpenTimeout = 4, 4*time.Minute
	if sameVerdict(v, next) || !sameVerdict(v, v) {
		t.Error("sameVerdict does not tell open periods apart")
	}
	c.Scope = breakerconfig.ScopePod
	if _, ok := fleetVerdict(c); ok {
		t.Error("a Pod-scoped config carried a fleet verdict")
	}
}
