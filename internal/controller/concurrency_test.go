package controller

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/counting"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// limitedBreaker is a breaker whose fleet may have maxInFlight calls in flight.
func limitedBreaker(maxInFlight int32, mutate ...func(*resiliencev1alpha1.Concurrency)) *resiliencev1alpha1.CircuitBreaker {
	cb := &resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "x", Generation: 1},
		Spec: resiliencev1alpha1.CircuitBreakerSpec{Concurrency: &resiliencev1alpha1.Concurrency{MaxInFlight: maxInFlight}}}
	for _, m := range mutate {
		m(cb.Spec.Concurrency)
	}
	return cb
}

// The document carries the share counted, the pods it was divided among, its generation,
// maxWait, the adaptive limiter and the fleet's baseline; a stored object's unset fields
// get their defaults; a breaker without spec.concurrency has none.
func TestRenderConcurrency(t *testing.T) {
	counted := counting.FleetConcurrency{MaxInFlight: 100, Pods: 4, Share: 25, Baseline: 12 * time.Millisecond}
	c, err := render(limitedBreaker(100, func(k *resiliencev1alpha1.Concurrency) {
		k.MaxWait = &metav1.Duration{Duration: 250 * time.Millisecond}
		k.Adaptive = &resiliencev1alpha1.AdaptiveConcurrency{Tolerance: ptr.To(2.5), MinLimit: ptr.To[int32](3)}
	}), nil, fleetCounts{concurrency: counted, shareGeneration: 7})
	if err != nil {
		t.Fatal(err)
	}
	want := breakerconfig.Concurrency{Share: 25, Pods: 4, Generation: 7, MaxWait: breakerconfig.Duration(250 * time.Millisecond),
		Adaptive: &breakerconfig.AdaptiveConcurrency{Tolerance: 2.5, MinLimit: 3}, Baseline: breakerconfig.Duration(12 * time.Millisecond)}
	if k := c.Concurrency; k == nil || k.Share != want.Share || k.Pods != want.Pods || k.Generation != want.Generation ||
		k.MaxWait != want.MaxWait || k.Baseline != want.Baseline || *k.Adaptive != *want.Adaptive {
		t.Errorf("rendered %+v, want %+v", c.Concurrency, want)
	}
	c, err = render(limitedBreaker(100, func(k *resiliencev1alpha1.Concurrency) { k.Adaptive = &resiliencev1alpha1.AdaptiveConcurrency{} }),
		nil, fleetCounts{concurrency: counting.FleetConcurrency{MaxInFlight: 100, Share: 100}, shareGeneration: 1})
	if err != nil || c.Concurrency.MaxWait != 0 || *c.Concurrency.Adaptive != (breakerconfig.AdaptiveConcurrency{Tolerance: 1.5, MinLimit: 1}) {
		t.Errorf("defaults: %+v, %v", c.Concurrency, err)
	}
	if c, err := render(&resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, nil, fleetCounts{}); err != nil || c.Concurrency != nil {
		t.Errorf("a breaker without a limit rendered %+v, %v", c.Concurrency, err)
	}
}

// The generation stays while the division does, moves with the share or with the pods it
// was divided among (a pod came, and the share may not have moved), and starts at 1.
func TestShareGeneration(t *testing.T) {
	doc := func(share, pods int, generation int64) string {
		c := breakerconfig.Config{Name: "x", Generation: 1, Policy: breakerconfig.Policy{OpenTimeout: breakerconfig.Duration(time.Second),
			Window: breakerconfig.Duration(time.Second), FailureRatio: 0.5, MinimumThroughput: 1, SuccessThreshold: 1, HalfOpenPermittedCalls: 1},
			Concurrency: &breakerconfig.Concurrency{Share: share, Pods: pods, Generation: generation}}
		b, err := breakerconfig.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for _, tc := range []struct {
		name      string
		published string
		counted   counting.FleetConcurrency
		want      int64
	}{
		{"nothing published", "", counting.FleetConcurrency{Share: 100}, 1},
		{"no limit published", `{"name":"x"}`, counting.FleetConcurrency{Share: 100}, 1},
		{"the same division", doc(25, 4, 7), counting.FleetConcurrency{Share: 25, Pods: 4}, 7},
		{"a pod more", doc(25, 4, 7), counting.FleetConcurrency{Share: 20, Pods: 5}, 8},
		{"a pod more, the same share", doc(2, 4, 7), counting.FleetConcurrency{Share: 2, Pods: 5}, 8},
		{"maxInFlight raised", doc(25, 4, 7), counting.FleetConcurrency{Share: 50, Pods: 4}, 8},
	} {
		if got := shareGeneration(tc.published, tc.counted); got != tc.want {
			t.Errorf("%s: generation %d, want %d", tc.name, got, tc.want)
		}
	}
}

// A change of the share, its pods, its generation or the fleet's baseline alone may wait
// for minFleetInterval; a change of the spec's part of it may not.
func TestFleetOnlyWithConcurrency(t *testing.T) {
	doc := func(cb *resiliencev1alpha1.CircuitBreaker, counted counting.FleetConcurrency, generation int64) (string, breakerconfig.Config) {
		c, err := render(cb, nil, fleetCounts{concurrency: counted, shareGeneration: generation})
		if err != nil {
			t.Fatal(err)
		}
		b, err := breakerconfig.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		return string(b), c
	}
	cb := limitedBreaker(100)
	old, _ := doc(cb, counting.FleetConcurrency{Share: 25, Pods: 4}, 3)
	if _, c := doc(cb, counting.FleetConcurrency{Share: 20, Pods: 5, Baseline: time.Millisecond}, 4); !fleetOnly(old, c) {
		t.Error("a new share alone is not fleet-only")
	}
	waits := cb.DeepCopy()
	waits.Spec.Concurrency.MaxWait = &metav1.Duration{Duration: time.Second}
	if _, c := doc(waits, counting.FleetConcurrency{Share: 25, Pods: 4}, 3); fleetOnly(old, c) {
		t.Error("a new maxWait is fleet-only")
	}
	plain, _ := doc(&resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "x", Generation: 1}}, counting.FleetConcurrency{}, 0)
	if _, c := doc(cb, counting.FleetConcurrency{Share: 25, Pods: 4}, 1); fleetOnly(plain, c) {
		t.Error("a first limit is fleet-only")
	}
}
