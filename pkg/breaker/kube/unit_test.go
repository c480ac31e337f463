package kube

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
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
// (DESIGN §5.12).
func TestReasonOf(t *testing.T) {
	for _, tc := range []struct {
		from, to breaker.State
		cause    breaker.TransitionCause
		want     string
		earned   bool
	}{
		{breaker.Closed, breaker.Open, breaker.CauseCalls, breakerconfig.ReasonTripped, true},
		{breaker.HalfOpen, breaker.Open, breaker.CauseCalls, breakerconfig.ReasonProbeFailed, true},
		{breaker.HalfOpen, breaker.Closed, breaker.CauseCalls, breakerconfig.ReasonProbesSucceeded, true},
		{breaker.Closed, breaker.Open, breaker.CauseTrip, breakerconfig.ReasonManual, true},
		{breaker.HalfOpen, breaker.Open, breaker.CauseTrip, breakerconfig.ReasonManual, true},
		{breaker.Open, breaker.HalfOpen, breaker.CauseTimeout, breakerconfig.ReasonTimedOut, false},
		{breaker.HalfOpen, breaker.Open, breaker.CauseTimeout, breakerconfig.ReasonTimedOut, false},
		{breaker.Closed, breaker.Open, breaker.CauseAdopted, breakerconfig.ReasonAdopted, false},
		{breaker.Open, breaker.Closed, breaker.CauseAdopted, breakerconfig.ReasonAdopted, false},
		{breaker.Closed, breaker.Open, breaker.CauseMode, breakerconfig.ReasonForced, false},
		{breaker.Open, breaker.Closed, breaker.CauseMode, breakerconfig.ReasonForced, false},
		// A cause the core may add later is not evidence until it is named.
		{breaker.Closed, breaker.Open, breaker.TransitionCause(99), breakerconfig.ReasonTimedOut, false},
	} {
		got := reasonOf(breaker.Transition{From: tc.from, To: tc.to, Cause: tc.cause})
		if got != tc.want {
			t.Errorf("%v → %v by %v: reason %s, want %s", tc.from, tc.to, tc.cause, got, tc.want)
		}
		if e := breakerconfig.Earned(wireState(tc.to), got); e != tc.earned {
			t.Errorf("%v → %v by %v (%s): earned %v, want %v", tc.from, tc.to, tc.cause, got, e, tc.earned)
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
	r.OnTransition(breaker.Transition{Breaker: "x", From: breaker.Open, To: breaker.HalfOpen, At: at.Add(time.Minute), Period: 2})
	r.OnTransition(breaker.Transition{Breaker: "x", From: breaker.Closed, To: breaker.Open, At: at, Period: 1,
		Counts: breaker.Counts{Calls: 4, Failures: 4}})
	if got := r.entries["x"].want; got.state != breaker.HalfOpen || !got.since.Equal(at.Add(time.Minute)) {
		t.Errorf("entry %+v, want the later half-open", got)
	}
	if names, _, _ := r.pending(); len(names) != 0 || len(r.wake) != 0 {
		t.Error("an unconfigured breaker is to be written")
	}

	// An adopted verdict carries no local evidence.
	r.OnTransition(breaker.Transition{Breaker: "x", From: breaker.HalfOpen, To: breaker.Open, At: at, Period: 3,
		Cause: breaker.CauseAdopted, Counts: breaker.Counts{Calls: 9, Failures: 1}})
	if got := r.entries["x"].want; got.calls != 0 {
		t.Errorf("adopted transition reported %d calls", got.calls)
	}
}

func TestStartAgentRefusesIncompleteOptions(t *testing.T) {
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
		_, err := StartAgent(context.Background(), tc.o)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("StartAgent(%+v): %v, want an error naming %s", tc.o, err, tc.want)
		}
	}
}

func TestOptionsFromEnvironment(t *testing.T) {
	// Outside a cluster: no in-cluster config.
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")

	t.Setenv(EnvConfigDir, "")
	t.Setenv(EnvNamespace, "shop")
	t.Setenv(EnvPodName, "")
	if _, err := OptionsFromEnvironment(); err == nil || !strings.Contains(err.Error(), "POD_NAME is not set") {
		t.Errorf("without POD_NAME: %v", err)
	}
	t.Setenv(EnvPodName, "web-1")
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
}

func TestConfigNameMustMatchKey(t *testing.T) {
	doc := `{"name": "other", "generation": 1, "openTimeout": "30s", "window": "10s", "failureRatio": 0.5,
		"minimumThroughput": 20, "successThreshold": 2, "halfOpenPermittedCalls": 1, "mode": "Enforce", "scope": "Pod"}`
	if _, err := parse("mine", doc); err == nil || !strings.Contains(err.Error(), "mine.json") {
		t.Errorf("parse: %v, want a refusal naming the key", err)
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
