package circuitbreaker

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// An empty adaptive asks for the limiter with its defaults; a concurrency without maxWait
// refuses at once. A set field is kept.
func TestDefaultConcurrency(t *testing.T) {
	cb := &resiliencev1alpha1.CircuitBreaker{Spec: resiliencev1alpha1.CircuitBreakerSpec{
		Concurrency: &resiliencev1alpha1.Concurrency{MaxInFlight: 10, Adaptive: &resiliencev1alpha1.AdaptiveConcurrency{}},
	}}
	if err := (Defaulter{}).Default(context.Background(), cb); err != nil {
		t.Fatal(err)
	}
	c := cb.Spec.Concurrency
	if c.MaxWait == nil || c.MaxWait.Duration != 0 || *c.Adaptive.Tolerance != 1.5 || *c.Adaptive.MinLimit != 1 {
		t.Errorf("defaults: %+v %+v", c, c.Adaptive)
	}
	set := &resiliencev1alpha1.CircuitBreaker{Spec: resiliencev1alpha1.CircuitBreakerSpec{Concurrency: &resiliencev1alpha1.Concurrency{
		MaxInFlight: 10, MaxWait: dur("2s"), Adaptive: &resiliencev1alpha1.AdaptiveConcurrency{Tolerance: ptr.To(3.0), MinLimit: ptr.To[int32](4)},
	}}}
	if err := (Defaulter{}).Default(context.Background(), set); err != nil {
		t.Fatal(err)
	}
	if c := set.Spec.Concurrency; c.MaxWait.Duration != 2*time.Second || *c.Adaptive.Tolerance != 3 || *c.Adaptive.MinLimit != 4 {
		t.Errorf("defaulting changed set fields: %+v %+v", c, c.Adaptive)
	}
	if none := (&resiliencev1alpha1.CircuitBreaker{}); (Defaulter{}).Default(context.Background(), none) != nil || none.Spec.Concurrency != nil {
		t.Errorf("an unset concurrency was set: %+v", none.Spec.Concurrency)
	}
}

// For an API server with an older CRD, the webhook refuses what the schema does, naming
// the field, NaN included; a value stored before the rule and left alone passes.
func TestValidateConcurrency(t *testing.T) {
	with := func(c resiliencev1alpha1.Concurrency) *resiliencev1alpha1.CircuitBreaker {
		return &resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: resiliencev1alpha1.CircuitBreakerSpec{Concurrency: &c}}
	}
	adaptive := func(tolerance float64, minLimit int32) *resiliencev1alpha1.AdaptiveConcurrency {
		return &resiliencev1alpha1.AdaptiveConcurrency{Tolerance: &tolerance, MinLimit: &minLimit}
	}
	for _, tc := range []struct {
		name   string
		cb     *resiliencev1alpha1.CircuitBreaker
		fields []string
	}{
		{"maxInFlight 0", with(resiliencev1alpha1.Concurrency{}), []string{"spec.concurrency.maxInFlight"}},
		{"maxInFlight above its bound", with(resiliencev1alpha1.Concurrency{MaxInFlight: resiliencev1alpha1.MaxInFlight + 1}), []string{"spec.concurrency.maxInFlight"}},
		{"maxWait above 10s", with(resiliencev1alpha1.Concurrency{MaxInFlight: 5, MaxWait: dur("11s")}), []string{"spec.concurrency.maxWait"}},
		{"maxWait negative", with(resiliencev1alpha1.Concurrency{MaxInFlight: 5, MaxWait: dur("-1ms")}), []string{"spec.concurrency.maxWait"}},
		{"maxWait below a millisecond", with(resiliencev1alpha1.Concurrency{MaxInFlight: 5, MaxWait: dur("1ms1ns")}), []string{"spec.concurrency.maxWait"}},
		{"tolerance below 1", with(resiliencev1alpha1.Concurrency{MaxInFlight: 5, Adaptive: adaptive(0.5, 1)}), []string{"spec.concurrency.adaptive.tolerance"}},
		{"tolerance NaN", with(resiliencev1alpha1.Concurrency{MaxInFlight: 5, Adaptive: adaptive(math.NaN(), 1)}), []string{"spec.concurrency.adaptive.tolerance"}},
		{"minLimit 0 and tolerance 6", with(resiliencev1alpha1.Concurrency{MaxInFlight: 5, Adaptive: adaptive(6, 0)}),
			[]string{"spec.concurrency.adaptive.tolerance", "spec.concurrency.adaptive.minLimit"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := (Validator{}).ValidateCreate(context.Background(), tc.cb)
			if got := causes(t, err); strings.Join(got, ",") != strings.Join(tc.fields, ",") {
				t.Errorf("fields %v, want %v (%v)", got, tc.fields, err)
			}
			relabelled := tc.cb.DeepCopy()
			relabelled.Labels = map[string]string{"team": "payments"}
			if _, err := (Validator{}).ValidateUpdate(context.Background(), tc.cb, relabelled); err != nil {
				t.Errorf("an update that keeps the stored concurrency: %v", err)
			}
		})
	}
	for _, c := range []resiliencev1alpha1.Concurrency{
		{MaxInFlight: 1, MaxWait: dur("0s"), Adaptive: adaptive(1, 1)},
		{MaxInFlight: resiliencev1alpha1.MaxInFlight, MaxWait: dur("10s"), Adaptive: adaptive(5, resiliencev1alpha1.MaxInFlight)},
	} {
		if _, err := (Validator{}).ValidateCreate(context.Background(), with(c)); err != nil {
			t.Errorf("concurrency %+v refused: %v", c, err)
		}
	}
}

// A maxInFlight below the pods that report the breaker, as the stored object's status
// counts them, and a maxWait longer than the window are legal but warned of; an update's
// own status says nothing of the pods.
func TestConcurrencyWarnings(t *testing.T) {
	const (
		few  = "spec.concurrency.maxInFlight (10) is below the 25 pods that report this breaker: each pod's share is at least 1, so the fleet may have 25 calls in flight; raise it, or run fewer pods"
		long = "spec.concurrency.maxWait (8s) is longer than spec.window (5s): callers wait for a slot longer than the breaker takes to judge a window, and pile up behind a saturated dependency instead of being refused"
	)
	breaker := func(maxInFlight int32, maxWait string, reporting int32) *resiliencev1alpha1.CircuitBreaker {
		cb := &resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: resiliencev1alpha1.CircuitBreakerSpec{
			Window: dur("5s"), Concurrency: &resiliencev1alpha1.Concurrency{MaxInFlight: maxInFlight, MaxWait: dur(maxWait)},
		}}
		if reporting > 0 {
			cb.Status.MemberCounts = &resiliencev1alpha1.MemberCounts{Reporting: reporting}
		}
		return cb
	}
	for _, tc := range []struct {
		name    string
		stored  *resiliencev1alpha1.CircuitBreaker // nil: a create
		updated *resiliencev1alpha1.CircuitBreaker
		want    []string
	}{
		{"no pods yet", nil, breaker(10, "0s", 0), nil},
		{"as many pods as the limit", breaker(10, "0s", 10), breaker(10, "0s", 0), nil},
		{"more pods than the limit", breaker(100, "0s", 25), breaker(10, "0s", 0), []string{few}},
		{"the update's own status is not read", breaker(100, "0s", 0), breaker(10, "0s", 25), nil},
		{"maxWait as long as the window", nil, breaker(10, "5s", 0), nil},
		{"maxWait longer than the window", nil, breaker(10, "8s", 0), []string{long}},
		{"both", breaker(10, "8s", 25), breaker(10, "8s", 25), []string{few, long}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			var err error
			if tc.stored == nil {
				got, err = (Validator{}).ValidateCreate(context.Background(), tc.updated)
			} else {
				got, err = (Validator{}).ValidateUpdate(context.Background(), tc.stored, tc.updated)
			}
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("warnings:\n%q\nwant:\n%q", got, tc.want)
			}
			for _, w := range got {
				if len(w) > 256 {
					t.Errorf("warning over 256 characters (%d): %s", len(w), w)
				}
			}
		})
	}
}
