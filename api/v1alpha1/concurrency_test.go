package v1alpha1_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/testenv"
)

// spec.concurrency (docs/design.md §12): an object with maxInFlight alone gets maxWait 0s,
// an empty adaptive gets tolerance 1.5 and minLimit 1, and tolerance is a JSON number
// kept exactly.
func TestAPIServerDefaultsConcurrency(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		spec      map[string]any
		maxWait   time.Duration
		adaptive  bool
		tolerance float64
		minLimit  int32
	}{
		{"maxInFlight alone", map[string]any{"concurrency": map[string]any{"maxInFlight": 100}}, 0, false, 0, 0},
		{"empty adaptive", map[string]any{"concurrency": map[string]any{"maxInFlight": 100, "adaptive": map[string]any{}}}, 0, true, 1.5, 1},
		{"set", map[string]any{"concurrency": map[string]any{"maxInFlight": 7, "maxWait": "250ms", "adaptive": map[string]any{"tolerance": 2.25, "minLimit": 3}}}, 250 * time.Millisecond, true, 2.25, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := testenv.Breaker("default", "concurrency-"+strings.ToLower(strings.ReplaceAll(tc.name, " ", "-")), tc.spec)
			if err := k8sClient.Create(ctx, obj); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = k8sClient.Delete(ctx, obj) }()
			var got resiliencev1alpha1.CircuitBreaker
			if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), &got); err != nil {
				t.Fatal(err)
			}
			c := got.Spec.Concurrency
			if c == nil || c.MaxWait == nil || c.MaxWait.Duration != tc.maxWait {
				t.Fatalf("concurrency %+v, want maxWait %s", c, tc.maxWait)
			}
			if a := c.Adaptive; (a != nil) != tc.adaptive {
				t.Fatalf("adaptive %+v, want set: %v", a, tc.adaptive)
			} else if a != nil && (a.Tolerance == nil || *a.Tolerance != tc.tolerance || a.MinLimit == nil || *a.MinLimit != tc.minLimit) {
				t.Errorf("adaptive %+v, want tolerance %v, minLimit %d", a, tc.tolerance, tc.minLimit)
			}
			if !tc.adaptive {
				return
			}
			raw := &unstructured.Unstructured{}
			raw.SetGroupVersionKind(obj.GroupVersionKind())
			if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), raw); err != nil {
				t.Fatal(err)
			}
			switch v, _, _ := unstructured.NestedFieldNoCopy(raw.Object, "spec", "concurrency", "adaptive", "tolerance"); v.(type) {
			case int64, float64:
			default:
				t.Errorf("spec.concurrency.adaptive.tolerance reads back as %T %v, want a JSON number", v, v)
			}
		})
	}
}

// The bounds are inclusive, and a maxWait may be written any way Go reads it.
func TestAPIServerAcceptsConcurrencyBounds(t *testing.T) {
	ctx := context.Background()
	for i, c := range []map[string]any{
		{"maxInFlight": 1, "maxWait": "0s", "adaptive": map[string]any{"tolerance": 1, "minLimit": 1}},
		{"maxInFlight": resiliencev1alpha1.MaxInFlight, "maxWait": "10s", "adaptive": map[string]any{"tolerance": 5.0, "minLimit": resiliencev1alpha1.MaxInFlight}},
		{"maxInFlight": 50, "maxWait": "0.5s"},
		{"maxInFlight": 50, "maxWait": "1500000us"},
	} {
		obj := testenv.Breaker("default", fmt.Sprintf("concurrency-bounds-%d", i), map[string]any{"concurrency": c})
		if err := k8sClient.Create(ctx, obj); err != nil {
			t.Errorf("concurrency %v refused: %v", c, err)
			continue
		}
		_ = k8sClient.Delete(ctx, obj)
	}
}

// A pod's concurrency figures are bounded by the schema (docs/design.md §5.17): an
// in-flight peak no share allows, a refusal count past the traffic bound, a baseline that
// is no duration or longer than any call a limiter judges. A baseline the schema refused
// only in the operator's decoder would have stopped its whole cache of reports.
func TestAPIServerBoundsAReportsConcurrency(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		change func(map[string]any)
		field  string
	}{
		{"inFlightPeak above maxInFlight's bound", func(e map[string]any) { e["inFlightPeak"] = resiliencev1alpha1.MaxInFlight + 1 }, "breakers[0].inFlightPeak"},
		{"inFlightPeak negative", func(e map[string]any) { e["inFlightPeak"] = -1 }, "breakers[0].inFlightPeak"},
		{"limited above the traffic bound", func(e map[string]any) { e["limited"] = int64(resiliencev1alpha1.MaxTrafficCount) + 1 }, "breakers[0].limited"},
		{"baseline in words", func(e map[string]any) { e["baseline"] = "quick" }, "breakers[0].baseline"},
		{"baseline negative", func(e map[string]any) { e["baseline"] = "-5ms" }, "breakers[0].baseline"},
		{"baseline past an hour", func(e map[string]any) { e["baseline"] = "1h0m0.001s" }, "breakers[0].baseline"},
		{"baseline too long for Go", func(e map[string]any) { e["baseline"] = "99999999999999h" }, "breakers[0].baseline"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := report("concurrency-report", reportEntry(tc.change))
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
	// Every spelling Go's Duration.String writes, at the bounds.
	for _, baseline := range []string{"0s", "850ns", "12.5µs", "12.5us", "3.2ms", "1.5s", "1h0m0s"} {
		obj := report("concurrency-report", reportEntry(func(e map[string]any) {
			e["inFlightPeak"], e["limited"], e["baseline"] = resiliencev1alpha1.MaxInFlight, resiliencev1alpha1.MaxTrafficCount, baseline
		}))
		if err := k8sClient.Create(ctx, obj); err != nil {
			t.Errorf("baseline %q refused: %v", baseline, err)
			continue
		}
		var got resiliencev1alpha1.BreakerReport
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), &got); err != nil {
			t.Error(err)
		} else if b := got.Breakers[0].Baseline; b == nil {
			t.Errorf("baseline %q: not kept", baseline)
		}
		_ = k8sClient.Delete(ctx, obj)
	}
}
