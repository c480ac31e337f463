package controller

import (
	"math"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
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
	c, err := render(cb, nil, trafficSums{pods: 200, requests: 12345, accepts: 6000, retries: 9, throttled: 7})
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
	p, err := back.Policy()
	if err != nil || p.RetryBudget == nil || *p.RetryBudget != (struct{ Percent, MinPerSecond int }{25, 40}) || p.Throttle == nil || p.Throttle.K != 1.5 {
		t.Errorf("policy read back: %+v, %v", p, err)
	}

	// Unset fields of a stored object get their defaults; with neither policy there is no fleet.
	c, err = render(&resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: resiliencev1alpha1.CircuitBreakerSpec{
		RetryBudget: &resiliencev1alpha1.RetryBudget{}, Throttle: &resiliencev1alpha1.Throttle{}}}, nil, trafficSums{pods: 3})
	if err != nil || *c.RetryBudget != (breakerconfig.RetryBudget{Percent: 20, MinPerSecond: 10}) || c.Throttle.K != 2 || *c.Fleet != (breakerconfig.Fleet{Pods: 3}) {
		t.Errorf("defaults: %+v %+v %+v, %v", c.RetryBudget, c.Throttle, c.Fleet, err)
	}
	c, err = render(&resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, nil, trafficSums{pods: 3, requests: 5})
	if err != nil || c.Fleet != nil || c.RetryBudget != nil || c.Throttle != nil {
		t.Errorf("a breaker with neither policy rendered %+v, %v", c, err)
	}
}

func trafficMember(pod string, requests, accepts, retries, throttled *int64) member {
	return member{pod: pod, entry: resiliencev1alpha1.BreakerReportEntry{Name: "b", State: resiliencev1alpha1.StateClosed,
		Requests: requests, Accepts: accepts, Retries: retries, Throttled: throttled}}
}

// Every running pod counts, reporting traffic or not; each count is clamped to the
// report's bound, and 5,000 pods at the bound neither overflow nor lose exactness.
func TestSumTraffic(t *testing.T) {
	n := ptr.To[int64]
	s := sumTraffic([]member{
		trafficMember("a", n(100), n(50), n(10), n(20)),
		trafficMember("b", n(200), n(100), n(20), n(30)),
		trafficMember("c", nil, nil, nil, nil),
		trafficMember("d", n(-7), n(math.MaxInt64), nil, nil),
	})
	want := trafficSums{pods: 4, requests: 300, accepts: 150 + breakerconfig.MaxTrafficCount, retries: 30, throttled: 50}
	if s != want {
		t.Errorf("sums %+v, want %+v", s, want)
	}
	many := make([]member, 5000)
	for i := range many {
		many[i] = trafficMember("p", n(math.MaxInt64), n(breakerconfig.MaxTrafficCount), n(breakerconfig.MaxTrafficCount), n(0))
	}
	s = sumTraffic(many)
	if s.requests != 5000*breakerconfig.MaxTrafficCount || s.accepts != s.requests || s.pods != 5000 || s.requests > maxFleetCount {
		t.Errorf("5,000 pods at the bound: %+v", s)
	}
}

func TestStatusTraffic(t *testing.T) {
	for _, tc := range []struct {
		name               string
		sums               trafficSums
		retry, throttledPc *int32
	}{
		{"ratios", trafficSums{pods: 3, requests: 300, accepts: 150, retries: 30, throttled: 50}, ptr.To[int32](11), ptr.To[int32](17)},
		{"no traffic", trafficSums{pods: 2}, nil, nil},
		{"retries only", trafficSums{pods: 1, requests: 4, retries: 4}, nil, ptr.To[int32](0)},
		{"floor beyond first attempts", trafficSums{pods: 1, requests: 30, retries: 20}, ptr.To[int32](200), ptr.To[int32](0)},
		{"more throttled than requests claimed", trafficSums{pods: 1, requests: 10, throttled: 40}, ptr.To[int32](0), ptr.To[int32](100)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := statusTraffic(tc.sums)
			if got.Pods != int32(tc.sums.pods) || got.Requests != tc.sums.requests || got.Throttled != tc.sums.throttled {
				t.Errorf("counts %+v from %+v", got, tc.sums)
			}
			if !ptrEqual(got.RetryPercent, tc.retry) || !ptrEqual(got.ThrottledPercent, tc.throttledPc) {
				t.Errorf("retryPercent %v throttledPercent %v, want %v %v", deref(got.RetryPercent), deref(got.ThrottledPercent), deref(tc.retry), deref(tc.throttledPc))
			}
		})
	}
}

func ptrEqual(a, b *int32) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

func deref(p *int32) any {
	if p == nil {
		return "unset"
	}
	return *p
}

// Only a change of the counts alone may wait for minFleetInterval: any other change of the
// document, or a first fleet, goes at the usual pace.
func TestFleetOnly(t *testing.T) {
	cb := &resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "x", Generation: 1},
		Spec: resiliencev1alpha1.CircuitBreakerSpec{Throttle: &resiliencev1alpha1.Throttle{K: ptr.To(2.0)}}}
	doc := func(cb *resiliencev1alpha1.CircuitBreaker, s trafficSums) (string, breakerconfig.Config) {
		c, err := render(cb, nil, s)
		if err != nil {
			t.Fatal(err)
		}
		b, err := breakerconfig.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		return string(b), c
	}
	old, _ := doc(cb, trafficSums{pods: 2, requests: 10, accepts: 10})
	if _, c := doc(cb, trafficSums{pods: 3, requests: 12, accepts: 9}); !fleetOnly(old, c) {
		t.Error("a change of the counts alone is not fleet-only")
	}
	next := cb.DeepCopy()
	next.Generation, next.Spec.Window = 2, &metav1.Duration{Duration: time.Minute}
	if _, c := doc(next, trafficSums{pods: 3}); fleetOnly(old, c) {
		t.Error("a new generation is fleet-only")
	}
	plain, _ := doc(&resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "x", Generation: 1}}, trafficSums{})
	if _, c := doc(cb, trafficSums{pods: 3}); fleetOnly(plain, c) {
		t.Error("a first fleet is fleet-only")
	}
}
