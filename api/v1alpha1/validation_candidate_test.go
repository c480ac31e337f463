package v1alpha1_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// spec.candidate has the bounds of the spec's fields of the same names, each bad value
// reported once under its path; where the candidate leaves openTimeout or maxOpenTimeout
// to the spec, the pair it ends up with is judged, naming the candidate's field.
func TestAPIServerCandidateBounds(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		spec      map[string]any
		candidate map[string]any
		field     string
	}{
		{"openTimeout below 1s", nil, map[string]any{"openTimeout": "999ms"}, "spec.candidate.openTimeout"},
		{"openTimeout not a duration", nil, map[string]any{"openTimeout": "soon"}, "spec.candidate.openTimeout"},
		{"openTimeout not whole milliseconds", nil, map[string]any{"openTimeout": "1.0000001s"}, "spec.candidate.openTimeout"},
		{"window above 1h", nil, map[string]any{"window": "61m"}, "spec.candidate.window"},
		{"failureRatePercent 0", nil, map[string]any{"failureRatePercent": 0}, "spec.candidate.failureRatePercent"},
		{"failureRatePercent 101", nil, map[string]any{"failureRatePercent": 101}, "spec.candidate.failureRatePercent"},
		{"minimumThroughput 0", nil, map[string]any{"minimumThroughput": 0}, "spec.candidate.minimumThroughput"},
		{"minimumThroughput above 10^6", nil, map[string]any{"minimumThroughput": 1000001}, "spec.candidate.minimumThroughput"},
		{"successThreshold 1001", nil, map[string]any{"successThreshold": 1001}, "spec.candidate.successThreshold"},
		{"halfOpenPermittedCalls 0", nil, map[string]any{"halfOpenPermittedCalls": 0}, "spec.candidate.halfOpenPermittedCalls"},
		{"slowCallDuration below 1ms", nil, map[string]any{"slowCallDuration": "999us"}, "spec.candidate.slowCallDuration"},
		{"slowCallRatePercent 101", nil, map[string]any{"slowCallRatePercent": 101}, "spec.candidate.slowCallRatePercent"},
		{"maxOpenTimeout above 24h", nil, map[string]any{"maxOpenTimeout": "25h"}, "spec.candidate.maxOpenTimeout"},
		{"maxOpenTimeout below its openTimeout", nil, map[string]any{"openTimeout": "2m", "maxOpenTimeout": "1m"}, "spec.candidate.maxOpenTimeout"},
		{"maxOpenTimeout below the spec's openTimeout", map[string]any{"openTimeout": "2m"}, map[string]any{"maxOpenTimeout": "1m"}, "spec.candidate.maxOpenTimeout"},
		{"openTimeout above the spec's maxOpenTimeout", map[string]any{"maxOpenTimeout": "1m"}, map[string]any{"openTimeout": "2m"}, "spec.candidate.openTimeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := map[string]any{"candidate": tc.candidate}
			for k, v := range tc.spec {
				spec[k] = v
			}
			obj := breaker("invalid-candidate", spec)
			err := k8sClient.Create(ctx, obj, client.DryRunAll)
			if !apierrors.IsInvalid(err) {
				t.Fatalf("want Invalid, got %v", err)
			}
			if n := causesNaming(err, tc.field); n != 1 {
				t.Errorf("%d causes name %s, want it reported once: %v", n, tc.field, err)
			}
		})
	}

	for i, tc := range []struct{ spec, candidate map[string]any }{
		{nil, map[string]any{"openTimeout": "1s", "window": "1s", "failureRatePercent": 1, "minimumThroughput": 1, "successThreshold": 1, "halfOpenPermittedCalls": 1}},
		{nil, map[string]any{"openTimeout": "24h", "window": "1h", "failureRatePercent": 100, "minimumThroughput": 1000000, "successThreshold": 1000, "halfOpenPermittedCalls": 1000}},
		{nil, map[string]any{"slowCallDuration": "1ms", "slowCallRatePercent": 1, "maxOpenTimeout": "24h"}},
		{map[string]any{"openTimeout": "1m"}, map[string]any{"maxOpenTimeout": "1m"}},
		{map[string]any{"maxOpenTimeout": "5m"}, map[string]any{"openTimeout": "5m"}},
		{map[string]any{"maxOpenTimeout": "1m"}, map[string]any{"openTimeout": "2m", "maxOpenTimeout": "2m"}},
		{nil, map[string]any{}},
	} {
		spec := map[string]any{"candidate": tc.candidate}
		for k, v := range tc.spec {
			spec[k] = v
		}
		obj := breaker(fmt.Sprintf("candidate-bounds-%d", i), spec)
		if err := k8sClient.Create(ctx, obj, client.DryRunAll); err != nil {
			t.Errorf("spec %v refused: %v", spec, err)
		}
	}

	// Nothing of the candidate is defaulted: what it leaves unset is the spec's.
	obj := breaker("candidate-no-defaults", map[string]any{"candidate": map[string]any{"failureRatePercent": 20}})
	if err := k8sClient.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = k8sClient.Delete(ctx, obj) }()
	var got resiliencev1alpha1.CircuitBreaker
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), &got); err != nil {
		t.Fatal(err)
	}
	if c := got.Spec.Candidate; c == nil || c.FailureRatePercent == nil || *c.FailureRatePercent != 20 || c.OpenTimeout != nil || c.MinimumThroughput != nil || c.SlowCallRatePercent != nil {
		t.Errorf("stored candidate %+v, want failureRatePercent 20 and nothing else", c)
	}
}

// A report entry's candidate: its required fields and bounds, and a full one stored as
// written.
func TestAPIServerReportsCandidates(t *testing.T) {
	ctx := context.Background()
	full := func() map[string]any {
		return map[string]any{
			"state": "Open", "since": "2026-11-29T21:55:51.123Z", "opens": 3, "wouldRefuse": 420,
			"startTime": "2026-11-29T20:00:00.000Z", "timeOpen": "1m30s",
			"enforced": map[string]any{"opens": 0, "refused": 0, "timeOpen": "0s"},
		}
	}
	for _, tc := range []struct {
		name   string
		change func(map[string]any)
		field  string
	}{
		{"state unknown", func(c map[string]any) { c["state"] = "Ajar" }, "breakers[0].candidate.state"},
		{"no since", func(c map[string]any) { delete(c, "since") }, "breakers[0].candidate.since"},
		{"opens negative", func(c map[string]any) { c["opens"] = -1 }, "breakers[0].candidate.opens"},
		{"wouldRefuse past 10^12", func(c map[string]any) { c["wouldRefuse"] = int64(1e12) + 1 }, "breakers[0].candidate.wouldRefuse"},
		{"no wouldRefuse", func(c map[string]any) { delete(c, "wouldRefuse") }, "breakers[0].candidate.wouldRefuse"},
		{"enforced.refused past 10^12", func(c map[string]any) { c["enforced"].(map[string]any)["refused"] = int64(1e12) + 1 }, "breakers[0].candidate.enforced.refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := full()
			tc.change(c)
			obj := report("bad-candidate-report", reportEntry(func(e map[string]any) { e["candidate"] = c }))
			err := k8sClient.Create(ctx, obj, client.DryRunAll)
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("want Invalid naming %s, got %v", tc.field, err)
			}
		})
	}

	obj := report("candidate-report", reportEntry(func(e map[string]any) { e["candidate"] = full() }))
	if err := k8sClient.Create(ctx, obj); err != nil {
		t.Fatalf("a valid report refused: %v", err)
	}
	defer func() { _ = k8sClient.Delete(ctx, obj) }()
	var got resiliencev1alpha1.BreakerReport
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), &got); err != nil {
		t.Fatal(err)
	}
	c := got.Breakers[0].Candidate
	if c == nil || c.State != resiliencev1alpha1.StateOpen || c.Since.UnixMilli()%1000 != 123 || c.Opens != 3 || c.WouldRefuse != 420 ||
		c.TimeOpen == nil || c.TimeOpen.Duration.String() != "1m30s" || c.Enforced == nil || c.Enforced.TimeOpen == nil {
		t.Errorf("stored candidate %+v, want it as written", c)
	}
}
