package v1alpha1_test

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// An empty retryBudget or throttle asks for the policy with its defaults (20 % and 10 a
// second; k 2), and k is a JSON number on the way in and out, kept exactly
// (docs/design.md §3).
func TestAPIServerDefaultsTheFleetPolicies(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		spec    map[string]any
		percent int32
		floor   int32
		k       float64
	}{
		{"empty", map[string]any{"retryBudget": map[string]any{}, "throttle": map[string]any{}}, 20, 10, 2},
		{"set", map[string]any{"retryBudget": map[string]any{"percent": 35, "minPerSecond": 0}, "throttle": map[string]any{"k": 1.25}}, 35, 0, 1.25},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := breaker("fleet-policies-"+tc.name, tc.spec)
			if err := k8sClient.Create(ctx, obj); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = k8sClient.Delete(ctx, obj) }()
			var got resiliencev1alpha1.CircuitBreaker
			if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), &got); err != nil {
				t.Fatal(err)
			}
			b, th := got.Spec.RetryBudget, got.Spec.Throttle
			if b == nil || b.Percent == nil || *b.Percent != tc.percent || b.MinPerSecond == nil || *b.MinPerSecond != tc.floor {
				t.Errorf("retryBudget %+v, want percent %d, minPerSecond %d", b, tc.percent, tc.floor)
			}
			if th == nil || th.K == nil || *th.K != tc.k {
				t.Errorf("throttle %+v, want k %v", th, tc.k)
			}
			raw := &unstructured.Unstructured{}
			raw.SetGroupVersionKind(obj.GroupVersionKind())
			if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), raw); err != nil {
				t.Fatal(err)
			}
			k, found, _ := unstructured.NestedFieldNoCopy(raw.Object, "spec", "throttle", "k")
			switch v := k.(type) {
			case int64, float64:
			default:
				t.Errorf("spec.throttle.k reads back as %T %v (found %v), want a JSON number", v, v, found)
			}
		})
	}
}
