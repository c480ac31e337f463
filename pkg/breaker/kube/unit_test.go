package kube

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker"
)

func TestMemberStatus(t *testing.T) {
	since := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	long := strings.Repeat("é", 600) // 1200 bytes
	for _, tc := range []struct {
		name      string
		m         member
		wantState resiliencev1alpha1.State
		wantRate  *int32
		wantCalls *int64
	}{
		{"closed without calls", member{state: breaker.Closed, since: since}, "Closed", nil, nil},
		{"open, two of three failed", member{state: breaker.Open, since: since, calls: 3, failures: 2}, "Open", ptr[int32](67), ptr[int64](3)},
		{"open, one of three failed", member{state: breaker.Open, since: since, calls: 3, failures: 1}, "Open", ptr[int32](33), ptr[int64](3)},
		{"half-open", member{state: breaker.HalfOpen, since: since, calls: 20, failures: 20}, "HalfOpen", ptr[int32](100), ptr[int64](20)},
		{"long refusal", member{state: breaker.Closed, since: since, configErr: truncate(long, maxConfigError), generation: 4}, "Closed", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ms := memberStatus("pod-1", tc.m)
			if ms.Pod != "pod-1" || ms.State != tc.wantState || !ms.Since.Time.Equal(since) || ms.ConfigGeneration != tc.m.generation {
				t.Errorf("got %+v", ms)
			}
			if !eqPtr(ms.FailureRatePercent, tc.wantRate) || !eqPtr(ms.Calls, tc.wantCalls) {
				t.Errorf("rate %v calls %v, want %v %v", deref(ms.FailureRatePercent), deref(ms.Calls), deref(tc.wantRate), deref(tc.wantCalls))
			}
			if n := len([]rune(ms.ConfigError)); n > 1024 {
				t.Errorf("configError of %d characters, over the CRD's 1024", n)
			}
			if !strings.HasPrefix(long, strings.TrimSuffix(ms.ConfigError, "…")) {
				t.Errorf("configError cut inside a character: %q", ms.ConfigError)
			}
		})
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
	if len(r.pending()) != 0 || len(r.wake) != 0 {
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
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
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

func TestFieldManager(t *testing.T) {
	if got := fieldManager("web-1"); got != "fusebox-pod-web-1" {
		t.Errorf("fieldManager(web-1) = %q", got)
	}
	long1, long2 := strings.Repeat("a", 200)+"1", strings.Repeat("a", 200)+"2"
	m1, m2 := fieldManager(long1), fieldManager(long2)
	if len(m1) != maxFieldManager || m1 == m2 || !strings.HasPrefix(m1, FieldManagerPrefix) {
		t.Errorf("long pod names: %q, %q", m1, m2)
	}
}
