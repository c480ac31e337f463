package v1alpha1_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/testenv"
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
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start envtest:", err)
		os.Exit(1)
	}
	scheme := runtime.NewScheme()
	_ = resiliencev1alpha1.AddToScheme(scheme)
	k8sClient, err = client.New(cfg, client.Options{Scheme: scheme})
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
				s.Mode != resiliencev1alpha1.ModeEnforce || s.Scope != resiliencev1alpha1.ScopePod {
				t.Errorf("defaults of an empty spec differ from DESIGN.md §3: %+v", s)
			}
		})
	}
}

func TestAPIServerAcceptsTheBounds(t *testing.T) {
	ctx := context.Background()
	for i, spec := range []map[string]any{
		{"openTimeout": "1s", "window": "1s", "failureRatePercent": 1, "minimumThroughput": 1, "successThreshold": 1, "halfOpenPermittedCalls": 1},
		{"openTimeout": "24h", "window": "1h", "failureRatePercent": 100, "mode": "ForcedOpen", "scope": "Fleet"},
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
