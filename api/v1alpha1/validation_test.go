package v1alpha1_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/testenv"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// These tests run the CRD in a real kube-apiserver: the schema and CEL rules
// are the validation, so only the API server can test them.

var k8sClient client.Client

func TestMain(m *testing.M) {
	env, err := testenv.New("../..")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cfg, err := testenv.Start(env)
	if err != nil {
		fmt.Fprintln(os.Stderr, "start envtest:", err)
		os.Exit(1)
	}
	scheme := runtime.NewScheme()
	_ = resiliencev1alpha1.AddToScheme(scheme)
	k8sClient, err = client.New(cfg, client.Options{Scheme: scheme})
	if err == nil {
		// The API server's own admission policies, as config/default installs them (the
		// name's length is one); no webhook.
		err = testenv.InstallPolicies(cfg, "../..")
	}
	code := 1
	if err == nil {
		code = m.Run()
	} else {
		fmt.Fprintln(os.Stderr, err)
	}
	_ = env.Stop()
	os.Exit(code)
}

// breaker is an unstructured CircuitBreaker, so tests can send what a typed
// client could not (wrong types, strings where numbers belong).
func breaker(name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "resilience.fusebox.dev/v1alpha1",
		"kind":       "CircuitBreaker",
		"metadata":   map[string]any{"name": name, "namespace": "default"},
	}}
	if spec != nil {
		u.Object["spec"] = spec
	}
	return u
}

func TestAPIServerRefusesInvalidBreakers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spec  map[string]any
		field string // the message must name it
	}{
		{"openTimeout below 1s", map[string]any{"openTimeout": "999ms"}, "openTimeout"},
		{"openTimeout above 24h", map[string]any{"openTimeout": "24h0m1s"}, "openTimeout"},
		{"openTimeout not a duration", map[string]any{"openTimeout": "thirty seconds"}, "openTimeout"},
		{"openTimeout negative", map[string]any{"openTimeout": "-5s"}, "openTimeout"},
		{"openTimeout a number", map[string]any{"openTimeout": 30}, "openTimeout"},
		{"window below 1s", map[string]any{"window": "500ms"}, "window"},
		{"window above 1h", map[string]any{"window": "61m"}, "window"},
		{"window without unit", map[string]any{"window": "10"}, "window"},
		{"failureRatePercent 0", map[string]any{"failureRatePercent": 0}, "failureRatePercent"},
		{"failureRatePercent 101", map[string]any{"failureRatePercent": 101}, "failureRatePercent"},
		{"failureRatePercent a string", map[string]any{"failureRatePercent": "50%"}, "failureRatePercent"},
		{"failureRatePercent fractional", map[string]any{"failureRatePercent": 12.5}, "failureRatePercent"},
		{"minimumThroughput 0", map[string]any{"minimumThroughput": 0}, "minimumThroughput"},
		{"minimumThroughput negative", map[string]any{"minimumThroughput": -1}, "minimumThroughput"},
		{"successThreshold 0", map[string]any{"successThreshold": 0}, "successThreshold"},
		{"halfOpenPermittedCalls 0", map[string]any{"halfOpenPermittedCalls": 0}, "halfOpenPermittedCalls"},
		{"mode unknown", map[string]any{"mode": "Sometimes"}, "mode"},
		{"mode lower case", map[string]any{"mode": "enforce"}, "mode"},
		{"scope unknown", map[string]any{"scope": "Cluster"}, "scope"},
		{"fleetQuorumPercent 101", map[string]any{"scope": "Fleet", "fleetQuorumPercent": 101}, "fleetQuorumPercent"},
		{"fleetQuorumPercent negative", map[string]any{"fleetQuorumPercent": -1}, "fleetQuorumPercent"},
		{"spec a string", nil, "spec"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := breaker("invalid", tc.spec)
			if tc.spec == nil {
				obj.Object["spec"] = "open sometimes"
			}
			err := k8sClient.Create(context.Background(), obj)
			if err == nil {
				_ = k8sClient.Delete(context.Background(), obj)
				t.Fatalf("API server accepted spec %v", tc.spec)
			}
			if !apierrors.IsInvalid(err) && !apierrors.IsBadRequest(err) {
				t.Fatalf("want Invalid, got %v", err)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("message does not name %s: %v", tc.field, err)
			}
		})
	}
}

func TestAPIServerDefaultsAnEmptySpec(t *testing.T) {
	ctx := context.Background()
	for name, obj := range map[string]*unstructured.Unstructured{
		"empty spec": breaker("defaults-empty", map[string]any{}),
		"no spec":    breaker("defaults-none", nil),
	} {
		t.Run(name, func(t *testing.T) {
			if err := k8sClient.Create(ctx, obj); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = k8sClient.Delete(ctx, obj) }()
			var got resiliencev1alpha1.CircuitBreaker
			if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), &got); err != nil {
				t.Fatal(err)
			}
			s := got.Spec
			if s.OpenTimeout == nil || s.OpenTimeout.Duration.String() != "30s" ||
				s.Window == nil || s.Window.Duration.String() != "10s" ||
				s.FailureRatePercent == nil || *s.FailureRatePercent != 50 ||
				s.MinimumThroughput == nil || *s.MinimumThroughput != 20 ||
				s.SuccessThreshold == nil || *s.SuccessThreshold != 2 ||
				s.HalfOpenPermittedCalls == nil || *s.HalfOpenPermittedCalls != 1 ||
				s.Mode != resiliencev1alpha1.ModeEnforce || s.Scope != resiliencev1alpha1.ScopePod ||
				s.FleetQuorumPercent == nil || *s.FleetQuorumPercent != 0 {
				t.Errorf("defaults of an empty spec differ from docs/design.md §3: %+v", s)
			}
		})
	}
}

func TestAPIServerAcceptsTheBounds(t *testing.T) {
	ctx := context.Background()
	for i, spec := range []map[string]any{
		{"openTimeout": "1s", "window": "1s", "failureRatePercent": 1, "minimumThroughput": 1, "successThreshold": 1, "halfOpenPermittedCalls": 1},
		{"openTimeout": "24h", "window": "1h", "failureRatePercent": 100, "mode": "ForcedOpen", "scope": "Fleet", "fleetQuorumPercent": 100},
		{"openTimeout": "1m30s", "window": "1.5s", "mode": "MetricsOnly"},
		{"mode": "ForcedClosed"},
	} {
		obj := breaker(fmt.Sprintf("bounds-%d", i), spec)
		if err := k8sClient.Create(ctx, obj); err != nil {
			t.Errorf("spec %v refused: %v", spec, err)
			continue
		}
		_ = k8sClient.Delete(ctx, obj)
	}
}

// The breaker is published under the ConfigMap key <name>.json, and keys are at most 253
// characters: a longer name is refused at admission, naming the field, not left for the
// operator to fail on.
func TestAPIServerRefusesANameNoConfigMapKeyHolds(t *testing.T) {
	ctx := context.Background()
	tooLong := breaker(strings.Repeat("a", 249), map[string]any{})
	// The admission policy (config/policy) takes a moment to be enforced after it is
	// created: dry runs until it is.
	deadline := time.Now().Add(15 * time.Second)
	for k8sClient.Create(ctx, tooLong, client.DryRunAll) == nil && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	err := k8sClient.Create(ctx, tooLong)
	if err == nil {
		_ = k8sClient.Delete(ctx, tooLong)
		t.Fatal("API server accepted a 249-character name")
	}
	// It names the field and its bound, and says nothing of "<nil>" (issue 21).
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "metadata.name must be at most 248 characters, not 249") {
		t.Errorf("want Invalid naming metadata.name, got %v", err)
	}
	if strings.Contains(err.Error(), "<nil>") {
		t.Errorf("the refusal says <nil>: %v", err)
	}
	longest := breaker(strings.Repeat("a", 248), map[string]any{})
	if err := k8sClient.Create(ctx, longest); err != nil {
		t.Fatalf("a 248-character name refused: %v", err)
	}
	_ = k8sClient.Delete(ctx, longest)
}

// report is an unstructured BreakerReport holding one entry.
func report(name string, entry map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": resiliencev1alpha1.GroupVersion.String(),
		"kind":       breakerconfig.ReportKind,
		"metadata":   map[string]any{"name": name, "namespace": "default"},
		"breakers":   []any{entry},
	}}
}

func reportEntry(change func(map[string]any)) map[string]any {
	e := map[string]any{
		"name": "payments-api", "state": "Open", "since": "2026-11-29T21:55:51.123Z", "reason": "Tripped",
		"calls": 40, "failureRatePercent": 60, "configGeneration": 3,
	}
	if change != nil {
		change(e)
	}
	return e
}

func TestAPIServerRefusesInvalidReports(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		change func(map[string]any)
		field  string // the message must name it
	}{
		{"state unknown", func(e map[string]any) { e["state"] = "Ajar" }, "breakers[0].state"},
		{"state lower case", func(e map[string]any) { e["state"] = "open" }, "breakers[0].state"},
		{"reason unknown", func(e map[string]any) { e["reason"] = "Vibes" }, "breakers[0].reason"},
		{"reason missing", func(e map[string]any) { delete(e, "reason") }, "breakers[0].reason"},
		{"since not a time", func(e map[string]any) { e["since"] = "yesterday" }, "breakers[0].since"},
		{"name empty", func(e map[string]any) { e["name"] = "" }, "breakers[0].name"},
		{"failureRatePercent 101", func(e map[string]any) { e["failureRatePercent"] = 101 }, "breakers[0].failureRatePercent"},
		{"calls negative", func(e map[string]any) { e["calls"] = -1 }, "breakers[0].calls"},
		{"configError too long", func(e map[string]any) { e["configError"] = strings.Repeat("x", 1025) }, "breakers[0].configError"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := report("bad-report", reportEntry(tc.change))
			err := k8sClient.Create(ctx, obj)
			if err == nil {
				_ = k8sClient.Delete(ctx, obj)
				t.Fatal("API server accepted the report")
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("want Invalid, got %v", err)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("message does not name %s: %v", tc.field, err)
			}
		})
	}

	t.Run("duplicate breaker names", func(t *testing.T) {
		obj := report("dup-report", reportEntry(nil))
		obj.Object["breakers"] = []any{reportEntry(nil), reportEntry(nil)}
		err := k8sClient.Create(ctx, obj)
		if err == nil {
			_ = k8sClient.Delete(ctx, obj)
			t.Fatal("API server accepted two entries of one breaker")
		}
		if !strings.Contains(err.Error(), "breakers[1]") {
			t.Errorf("message does not name the duplicate: %v", err)
		}
	})
}

func TestAPIServerKeepsAReportsMilliseconds(t *testing.T) {
	ctx := context.Background()
	obj := report("good-report", reportEntry(nil))
	if err := k8sClient.Create(ctx, obj); err != nil {
		t.Fatalf("a valid report refused: %v", err)
	}
	defer func() { _ = k8sClient.Delete(ctx, obj) }()
	var got resiliencev1alpha1.BreakerReport
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Breakers) != 1 || got.Breakers[0].Since.UnixMilli()%1000 != 123 || got.Breakers[0].Reason != "Tripped" {
		t.Errorf("stored report %+v, want the entry as written, milliseconds included", got.Breakers)
	}
}

// causesNaming counts the causes of an Invalid error whose field or message names field.
func causesNaming(err error, field string) int {
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Details == nil {
		return 0
	}
	n := 0
	for _, c := range status.Status().Details.Causes {
		if strings.Contains(c.Field, field) || strings.Contains(c.Message, field) {
			n++
		}
	}
	return n
}

// The bounds of docs/design.md §3 for slow calls and backoff, and each bad value reported once,
// naming its field: a string that is no duration fails the pattern alone, not the CEL
// bounds as well.
func TestAPIServerSlowCallAndBackoffBounds(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		spec  map[string]any
		field string
	}{
		{"slowCallDuration below 1ms", map[string]any{"slowCallDuration": "999us"}, "slowCallDuration"},
		{"slowCallDuration above 1h", map[string]any{"slowCallDuration": "1h0m1s"}, "slowCallDuration"},
		{"slowCallDuration not a duration", map[string]any{"slowCallDuration": "slow"}, "slowCallDuration"},
		{"slowCallDuration negative", map[string]any{"slowCallDuration": "-1s"}, "slowCallDuration"},
		{"slowCallDuration a number", map[string]any{"slowCallDuration": 2}, "slowCallDuration"},
		{"slowCallRatePercent 0", map[string]any{"slowCallDuration": "1s", "slowCallRatePercent": 0}, "slowCallRatePercent"},
		{"slowCallRatePercent 101", map[string]any{"slowCallDuration": "1s", "slowCallRatePercent": 101}, "slowCallRatePercent"},
		{"maxOpenTimeout above 24h", map[string]any{"maxOpenTimeout": "24h0m1s"}, "maxOpenTimeout"},
		{"maxOpenTimeout below the default openTimeout", map[string]any{"maxOpenTimeout": "10s"}, "maxOpenTimeout must be at least openTimeout"},
		{"maxOpenTimeout below openTimeout", map[string]any{"openTimeout": "2m", "maxOpenTimeout": "1m59s"}, "maxOpenTimeout must be at least openTimeout"},
		{"maxOpenTimeout not a duration", map[string]any{"maxOpenTimeout": "forever"}, "maxOpenTimeout"},
		{"maxOpenTimeout with an openTimeout that is no duration", map[string]any{"openTimeout": "soon", "maxOpenTimeout": "1m"}, "openTimeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := breaker("invalid-slow", tc.spec)
			err := k8sClient.Create(ctx, obj)
			if err == nil {
				_ = k8sClient.Delete(ctx, obj)
				t.Fatalf("API server accepted spec %v", tc.spec)
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("want Invalid, got %v", err)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("message does not name %s: %v", tc.field, err)
			}
			if n := causesNaming(err, tc.field); n != 1 {
				t.Errorf("%d causes name %s, want it reported once: %v", n, tc.field, err)
			}
		})
	}

	for i, spec := range []map[string]any{
		{"slowCallDuration": "1ms", "slowCallRatePercent": 1},
		{"slowCallDuration": "1h", "slowCallRatePercent": 100},
		{"slowCallDuration": "1.5s", "maxOpenTimeout": "30s"},
		{"openTimeout": "1s", "maxOpenTimeout": "24h"},
		{"openTimeout": "24h", "maxOpenTimeout": "24h"},
		{"slowCallRatePercent": 40},
	} {
		obj := breaker(fmt.Sprintf("slow-bounds-%d", i), spec)
		if err := k8sClient.Create(ctx, obj); err != nil {
			t.Errorf("spec %v refused: %v", spec, err)
			continue
		}
		_ = k8sClient.Delete(ctx, obj)
	}

	obj := breaker("slow-defaults", map[string]any{})
	if err := k8sClient.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = k8sClient.Delete(ctx, obj) }()
	var got resiliencev1alpha1.CircuitBreaker
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), &got); err != nil {
		t.Fatal(err)
	}
	if s := got.Spec; s.SlowCallDuration != nil || s.MaxOpenTimeout != nil || s.SlowCallRatePercent == nil || *s.SlowCallRatePercent != 100 {
		t.Errorf("defaults: slowCallDuration %v maxOpenTimeout %v slowCallRatePercent %v, want unset, unset, 100",
			s.SlowCallDuration, s.MaxOpenTimeout, s.SlowCallRatePercent)
	}
}

// worstKeys is n key names for a Group summary's worst list.
func worstKeys(n int) []any {
	keys := make([]any, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("host-%d.example.com", i)
	}
	return keys
}

// A report's slow-call, backoff and Group fields: their bounds (the schema's bound on
// keys.worst is what the pods write, breakerconfig.MaxWorstKeys), and a full entry stored
// as written.
func TestAPIServerReportsSlowCallsBackoffAndGroups(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		change func(map[string]any)
		field  string
	}{
		{"trigger unknown", func(e map[string]any) { e["trigger"] = "BadVibes" }, "breakers[0].trigger"},
		{"slowCallRatePercent 101", func(e map[string]any) { e["slowCallRatePercent"] = 101 }, "breakers[0].slowCallRatePercent"},
		{"consecutiveOpens negative", func(e map[string]any) { e["consecutiveOpens"] = -1 }, "breakers[0].consecutiveOpens"},
		{"keys.open negative", func(e map[string]any) { e["keys"] = map[string]any{"keys": 3, "open": -1, "halfOpen": 0} }, "breakers[0].keys.open"},
		{"keys.worst more than MaxWorstKeys", func(e map[string]any) {
			e["keys"] = map[string]any{"keys": 9, "open": 9, "halfOpen": 0, "worst": worstKeys(breakerconfig.MaxWorstKeys + 1)}
		}, "breakers[0].keys.worst"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := report("bad-slow-report", reportEntry(tc.change))
			err := k8sClient.Create(ctx, obj)
			if err == nil {
				_ = k8sClient.Delete(ctx, obj)
				t.Fatal("API server accepted the report")
			}
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("want Invalid naming %s, got %v", tc.field, err)
			}
		})
	}

	obj := report("slow-report", reportEntry(func(e map[string]any) {
		e["trigger"], e["slowCallRatePercent"], e["consecutiveOpens"], e["openTimeout"] = "SlowCallRate", 85, 3, "2m0s"
		e["keys"] = map[string]any{"keys": 40, "open": 8, "halfOpen": 1, "worst": worstKeys(breakerconfig.MaxWorstKeys)}
	}))
	if err := k8sClient.Create(ctx, obj); err != nil {
		t.Fatalf("a valid report refused: %v", err)
	}
	defer func() { _ = k8sClient.Delete(ctx, obj) }()
	var got resiliencev1alpha1.BreakerReport
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), &got); err != nil {
		t.Fatal(err)
	}
	e := got.Breakers[0]
	if e.Trigger != "SlowCallRate" || e.SlowCallRatePercent == nil || *e.SlowCallRatePercent != 85 || e.ConsecutiveOpens != 3 ||
		e.OpenTimeout == nil || e.OpenTimeout.Duration.String() != "2m0s" || e.Keys == nil || e.Keys.Keys != 40 || len(e.Keys.Worst) != breakerconfig.MaxWorstKeys {
		t.Errorf("stored entry %+v, want it as written", e)
	}
}
