package controller

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/counting"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/kube"
)

// The wire format of the fleet policies (docs/design.md §4): k a JSON number, and the
// fleet counts beside them.
func TestRenderTheFleetPolicies(t *testing.T) {
	cb := &resiliencev1alpha1.CircuitBreaker{
		ObjectMeta: metav1.ObjectMeta{Name: "payments-api", Generation: 2},
		Spec: resiliencev1alpha1.CircuitBreakerSpec{
			RetryBudget: &resiliencev1alpha1.RetryBudget{Percent: ptr.To[int32](25), MinPerSecond: ptr.To[int32](40)},
			Throttle:    &resiliencev1alpha1.Throttle{K: ptr.To(1.5)},
		},
	}
	c, err := render(cb, nil, fleetCounts{traffic: counting.FleetTraffic{Pods: 200, Requests: 1 << 40, Accepts: 1 << 39, Retries: 9, Throttled: 7, Median: counting.Window{Requests: 12345, Accepts: 6000}}})
	if err != nil {
		t.Fatal(err)
	}
	doc, err := breakerconfig.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	want := `{
  "name": "payments-api",
  "generation": 2,
  "openTimeout": "30s",
  "window": "10s",
  "failureRatio": 0.5,
  "minimumThroughput": 20,
  "successThreshold": 2,
  "halfOpenPermittedCalls": 1,
  "mode": "Enforce",
  "scope": "Pod",
  "retryBudget": {
    "percent": 25,
    "minPerSecond": 40
  },
  "throttle": {
    "k": 1.5
  },
  "fleet": {
    "pods": 200,
    "requests": 12345,
    "accepts": 6000
  }
}`
	if string(doc) != want {
		t.Errorf("rendered\n%s\nwant\n%s", doc, want)
	}
	back, err := breakerconfig.Parse(doc)
	if err != nil {
		t.Fatalf("the pods refuse what the operator renders: %v", err)
	}
	p, err := kube.PolicyOf(back)
	if err != nil || p.RetryBudget == nil || *p.RetryBudget != (struct{ Percent, MinPerSecond int }{25, 40}) || p.Throttle == nil || p.Throttle.K != 1.5 {
		t.Errorf("policy read back: %+v, %v", p, err)
	}

	// Unset fields of a stored object get their defaults; with neither policy there is no fleet.
	c, err = render(&resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: resiliencev1alpha1.CircuitBreakerSpec{
		RetryBudget: &resiliencev1alpha1.RetryBudget{}, Throttle: &resiliencev1alpha1.Throttle{}}}, nil, fleetCounts{traffic: counting.FleetTraffic{Pods: 3}})
	if err != nil || *c.RetryBudget != (breakerconfig.RetryBudget{Percent: 20, MinPerSecond: 10}) || c.Throttle.K != 2 || *c.Fleet != (breakerconfig.Fleet{Pods: 3}) {
		t.Errorf("defaults: %+v %+v %+v, %v", c.RetryBudget, c.Throttle, c.Fleet, err)
	}
	c, err = render(&resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, nil, fleetCounts{traffic: counting.FleetTraffic{Pods: 3, Requests: 5, Median: counting.Window{Requests: 5}}})
	if err != nil || c.Fleet != nil || c.RetryBudget != nil || c.Throttle != nil {
		t.Errorf("a breaker with neither policy rendered %+v, %v", c, err)
	}
}

// Only a change of the counts alone may wait for minFleetInterval: any other change of the
// document, or a first fleet, goes at the usual pace.
func TestFleetOnly(t *testing.T) {
	cb := &resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "x", Generation: 1},
		Spec: resiliencev1alpha1.CircuitBreakerSpec{Throttle: &resiliencev1alpha1.Throttle{K: ptr.To(2.0)}}}
	doc := func(cb *resiliencev1alpha1.CircuitBreaker, s counting.FleetTraffic) (string, breakerconfig.Config) {
		c, err := render(cb, nil, fleetCounts{traffic: s})
		if err != nil {
			t.Fatal(err)
		}
		b, err := breakerconfig.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		return string(b), c
	}
	old, _ := doc(cb, counting.FleetTraffic{Pods: 2, Median: counting.Window{Requests: 10, Accepts: 10}})
	if _, c := doc(cb, counting.FleetTraffic{Pods: 3, Median: counting.Window{Requests: 12, Accepts: 9}}); !fleetOnly(old, c) {
		t.Error("a change of the counts alone is not fleet-only")
	}
	next := cb.DeepCopy()
	next.Generation, next.Spec.Window = 2, &metav1.Duration{Duration: time.Minute}
	if _, c := doc(next, counting.FleetTraffic{Pods: 3}); fleetOnly(old, c) {
		t.Error("a new generation is fleet-only")
	}
	plain, _ := doc(&resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "x", Generation: 1}}, counting.FleetTraffic{})
	if _, c := doc(cb, counting.FleetTraffic{Pods: 3}); fleetOnly(plain, c) {
		t.Error("a first fleet is fleet-only")
	}
}
