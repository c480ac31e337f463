package v1alpha1_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/testenv"
)

// What the webhooks refuse, the API server refuses without them (issue 18), each with one
// line that names the field and says what is wrong in words (issue 21). pkg/webhook's
// suite sends the same inputs with every webhook installed.
func TestAPIServerRefusesWhatTheWebhooksRefuse(t *testing.T) {
	ctx := context.Background()
	for _, r := range testenv.Refusals() {
		t.Run(r.Name, func(t *testing.T) {
			obj := testenv.Breaker("default", "refused", r.Spec)
			err := k8sClient.Create(ctx, obj)
			if err == nil {
				_ = k8sClient.Delete(ctx, obj)
			}
			if err := testenv.CheckRefusal(r, err); err != nil {
				t.Error(err)
			}
		})
	}
}

// The bounds are inclusive, a duration may be written any way Go reads it as long as it is
// whole milliseconds, and successThreshold may exceed halfOpenPermittedCalls: the first
// caps the probes running at once, the second counts consecutive successes over the whole
// half-open period, one probe after another as slots free up. The defaults themselves are
// 2 and 1, and pkg/breaker closes such a breaker after two probes in a row
// (TestOpenAndHalfOpen/successThreshold_consecutive_probe_successes_close_it...).
func TestAPIServerAcceptsWhatTheWebhooksAccept(t *testing.T) {
	ctx := context.Background()
	for i, spec := range []map[string]any{
		{"minimumThroughput": 1_000_000, "halfOpenPermittedCalls": 1000, "successThreshold": 1000},
		{"successThreshold": 5, "halfOpenPermittedCalls": 1},
		{"openTimeout": "1.001s", "window": "1500ms", "slowCallDuration": "1ms", "maxOpenTimeout": "2m0.5s"},
		{"openTimeout": "1h30m", "window": "0.5h", "slowCallDuration": "1000us", "maxOpenTimeout": "24h"},
		{"override": map[string]any{"mode": "ForcedOpen", "until": "2030-01-01T00:00:00Z", "reason": " INC-7 "}},
		{"override": map[string]any{"mode": "ForcedClosed", "until": "2030-01-01T00:00:00Z", "reason": "x"}},
		{"retryBudget": map[string]any{"percent": 1, "minPerSecond": 0}, "throttle": map[string]any{"k": 1}},
		{"retryBudget": map[string]any{"percent": 100, "minPerSecond": 10000}, "throttle": map[string]any{"k": 10.0}},
		{"retryBudget": map[string]any{}, "throttle": map[string]any{"k": 1.25}},
	} {
		obj := testenv.Breaker("default", fmt.Sprintf("accepted-%d", i), spec)
		if err := k8sClient.Create(ctx, obj); err != nil {
			t.Errorf("spec %v refused: %v", spec, err)
			continue
		}
		_ = k8sClient.Delete(ctx, obj)
	}
}

// A pod's counts are bounded so that the operator's sums over a fleet cannot overflow
// int32 (issue 18: a keys.open of 2^31-1 froze a status), and a bound no real pod reaches.
func TestAPIServerBoundsAReportsCounts(t *testing.T) {
	ctx := context.Background()
	traffic := func(requests, accepts, retries, throttled int64) func(map[string]any) {
		return func(e map[string]any) {
			e["requests"], e["accepts"], e["retries"], e["throttled"] = requests, accepts, retries, throttled
		}
	}
	group := func(keys, open, halfOpen int64) func(map[string]any) {
		return func(e map[string]any) { e["keys"] = map[string]any{"keys": keys, "open": open, "halfOpen": halfOpen} }
	}
	for _, tc := range []struct {
		name   string
		change func(map[string]any)
		field  string
	}{
		{"keys.open 2^31-1", group(5, math.MaxInt32, 0), "breakers[0].keys.open"},
		{"keys.halfOpen above the bound", group(5, 0, resiliencev1alpha1.MaxGroupKeys+1), "breakers[0].keys.halfOpen"},
		{"keys.keys above the bound", group(resiliencev1alpha1.MaxGroupKeys+1, 0, 0), "breakers[0].keys.keys"},
		{"calls above 2^53-1", func(e map[string]any) { e["calls"] = int64(1) << 53 }, "breakers[0].calls"},
		{"consecutiveOpens above int32", func(e map[string]any) { e["consecutiveOpens"] = int64(math.MaxInt32) + 1 }, "breakers[0].consecutiveOpens"},
		{"requests above the traffic bound", func(e map[string]any) { e["requests"] = int64(resiliencev1alpha1.MaxTrafficCount) + 1 }, "breakers[0].requests"},
		{"accepts 2^63-1", func(e map[string]any) { e["accepts"] = int64(math.MaxInt64) }, "breakers[0].accepts"},
		{"retries negative", func(e map[string]any) { e["retries"] = -1 }, "breakers[0].retries"},
		{"throttled above the traffic bound", func(e map[string]any) { e["throttled"] = int64(resiliencev1alpha1.MaxTrafficCount) + 1 }, "breakers[0].throttled"},
		// Issue 29: accepts above requests turned throttling off for every quiet pod.
		{"accepts above requests", traffic(10, 11, 0, 0), "breakers[0].accepts"},
		{"accepts without requests", func(e map[string]any) { e["accepts"] = 1 }, "breakers[0].accepts"},
		{"retries above requests", traffic(1_000_000, 0, 1_000_001, 0), "breakers[0].retries"},
		{"throttled above requests", traffic(5, 0, 0, 6), "breakers[0].throttled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := report("bounded-report", reportEntry(tc.change))
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
	// A window at the rules' edge: every request accepted, retried and throttled at once
	// is more than any pod counts, but no count passes requests.
	edge := report("bounded-report", reportEntry(traffic(resiliencev1alpha1.MaxTrafficCount, resiliencev1alpha1.MaxTrafficCount, resiliencev1alpha1.MaxTrafficCount, resiliencev1alpha1.MaxTrafficCount)))
	if err := k8sClient.Create(ctx, edge); err != nil {
		t.Fatalf("a window whose counts equal its requests refused: %v", err)
	}
	_ = k8sClient.Delete(ctx, edge)
	obj := report("bounded-report", reportEntry(group(resiliencev1alpha1.MaxGroupKeys, resiliencev1alpha1.MaxGroupKeys, resiliencev1alpha1.MaxGroupKeys)))
	if err := k8sClient.Create(ctx, obj); err != nil {
		t.Fatalf("a report at the bounds refused: %v", err)
	}
	_ = k8sClient.Delete(ctx, obj)
	if int64(resiliencev1alpha1.MaxGroupKeys)*5000 > math.MaxInt32 {
		t.Errorf("MaxGroupKeys %d: 5,000 pods' sum overflows int32", resiliencev1alpha1.MaxGroupKeys)
	}
}
