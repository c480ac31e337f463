package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/testutil"
	"github.com/fusebox-dev/fusebox/pkg/breaker"
)

// benchInstances is how many application instances the propagation benchmarks run.
const benchInstances = 20

// BenchmarkPropagation measures how long the loop of docs/design.md §2 takes on a real
// API server with 20 instances: a CircuitBreaker update until every instance runs
// it, an instance's trip until the resource says Open=True, and a fleet verdict
// until every instance is open. Each iteration is one sample, taken once the
// previous one has settled; p50 and p99 are reported in milliseconds. Run with
// -benchtime=50x (make bench-cluster).
func BenchmarkPropagation(b *testing.B) {
	b.Run("ConfigUpdateToAllInstances", func(b *testing.B) {
		ns, cb, apps := benchSetup(b, resiliencev1alpha1.ScopePod)
		samples := make([]time.Duration, 0, b.N)
		for i := 0; b.Loop(); i++ {
			percent := int32(10 + i%80)
			patch := client.MergeFrom(cb.DeepCopy())
			cb.Spec.FailureRatePercent = ptr.To(percent)
			start := time.Now()
			if err := k8sClient.Patch(context.Background(), cb, patch); err != nil {
				b.Fatal(err)
			}
			want := float64(percent) / 100
			waitUntil(b, "every pod runs the new policy", func() bool {
				for _, a := range apps {
					if a.breaker(cb.Name).Policy().FailureRatio != want {
						return false
					}
				}
				return true
			})
			samples = append(samples, time.Since(start))
			settle(b, ns, cb.Name, time.Time{})
		}
		report(b, samples)
	})

	b.Run("TripToOpenCondition", func(b *testing.B) {
		ns, cb, apps := benchSetup(b, resiliencev1alpha1.ScopePod)
		samples := make([]time.Duration, 0, b.N)
		for i := 0; b.Loop(); i++ {
			br := apps[i%len(apps)].breaker(cb.Name)
			start := time.Now()
			br.Trip()
			waitUntil(b, "the resource is Open", func() bool { return resourceState(ns, cb.Name, metav1.ConditionTrue) })
			samples = append(samples, time.Since(start))

			closedAt := time.Now()
			br.Adopt(breaker.Verdict{State: breaker.Closed, Since: closedAt})
			settle(b, ns, cb.Name, time.Time{})
		}
		report(b, samples)
	})

	b.Run("FleetVerdictToAllInstances", func(b *testing.B) {
		ns, cb, apps := benchSetup(b, resiliencev1alpha1.ScopeFleet)
		samples := make([]time.Duration, 0, b.N)
		all := func(s breaker.State) func() bool {
			return func() bool {
				for _, a := range apps {
					if a.breaker(cb.Name).State() != s {
						return false
					}
				}
				return true
			}
		}
		for i := 0; b.Loop(); i++ {
			br := apps[i%len(apps)].breaker(cb.Name)
			start := time.Now()
			br.Trip()
			waitUntil(b, "every pod is open", all(breaker.Open))
			samples = append(samples, time.Since(start))

			// Untimed reset. Only a Closed the pods earned closes a fleet (docs/design.md §5.12),
			// and a probe would have to wait out the open timeout: a round trip through
			// ForcedClosed closes every pod at once instead.
			closedAt := time.Now()
			setMode(b, cb, resiliencev1alpha1.ModeForcedClosed)
			waitUntil(b, "every pod is closed", all(breaker.Closed))
			setMode(b, cb, resiliencev1alpha1.ModeEnforce)
			settle(b, ns, cb.Name, closedAt)
		}
		report(b, samples)
	})
}

// benchSetup creates a breaker whose open period outlasts the benchmark, so
// nothing goes half-open on its own, and instances that all report it.
func benchSetup(b *testing.B, scope resiliencev1alpha1.Scope) (string, *resiliencev1alpha1.CircuitBreaker, []*instance) {
	b.Helper()
	ns := newNamespace(b)
	cb := &resiliencev1alpha1.CircuitBreaker{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bench"},
		Spec: resiliencev1alpha1.CircuitBreakerSpec{
			OpenTimeout: &metav1.Duration{Duration: time.Hour},
			Scope:       scope,
		},
	}
	if err := k8sClient.Create(context.Background(), cb); err != nil {
		b.Fatal(err)
	}
	apps := startInstances(b, ns, benchInstances)
	for _, a := range apps {
		a.breaker(cb.Name)
	}
	settle(b, ns, cb.Name, time.Time{})
	return ns, cb, apps
}

// settle waits, untimed, until the previous sample's aftermath is over: every
// instance has reported the current generation and a Closed state reached no
// earlier than closedAt, and the operator has written it all down. Each sample
// then measures one change on a quiet system, not the queue of writes the
// previous one left on the same object (see docs/benchmarks.md).
func settle(b *testing.B, ns, name string, closedAt time.Time) {
	b.Helper()
	var last string
	deadline := time.Now().Add(30 * time.Second)
	for {
		cb, err := getBreaker(ns, name)
		if err == nil && settled(cb, closedAt) {
			return
		}
		if err != nil {
			last = err.Error()
		} else {
			last = fmt.Sprintf("generation %d, status %+v", cb.Generation, cb.Status)
		}
		if time.Now().After(deadline) {
			b.Fatalf("not settled within 30s: %s", last)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func settled(cb *resiliencev1alpha1.CircuitBreaker, closedAt time.Time) bool {
	if cb.Status.MemberCounts == nil || cb.Status.ObservedGeneration != cb.Generation {
		return false
	}
	for _, m := range cb.Status.Members {
		// status.members is written by the operator as metav1.Time: whole seconds.
		if m.State != resiliencev1alpha1.StateClosed || m.Since.Time.Before(closedAt.Truncate(time.Second)) {
			return false
		}
	}
	c := cb.Status.MemberCounts
	return c.Reporting == benchInstances && c.OnLatestConfig == benchInstances && c.Closed == benchInstances &&
		hasCondition(cb, resiliencev1alpha1.ConditionConfigApplied, metav1.ConditionTrue) == nil &&
		hasCondition(cb, resiliencev1alpha1.ConditionOpen, metav1.ConditionFalse) == nil
}

// setMode patches the mode of cb and waits for nothing.
func setMode(b *testing.B, cb *resiliencev1alpha1.CircuitBreaker, mode resiliencev1alpha1.Mode) {
	b.Helper()
	patch := client.MergeFrom(cb.DeepCopy())
	cb.Spec.Mode = mode
	if err := k8sClient.Patch(context.Background(), cb, patch); err != nil {
		b.Fatal(err)
	}
}

// resourceState reports whether the resource's Open condition has status.
func resourceState(ns, name string, open metav1.ConditionStatus) bool {
	cb, err := getBreaker(ns, name)
	return err == nil && hasCondition(cb, resiliencev1alpha1.ConditionOpen, open) == nil
}

// waitUntil waits for cond, asking every 2 ms: the benchmark's figures are the waits.
func waitUntil(b *testing.B, what string, cond func() bool) {
	b.Helper()
	testutil.EventuallyEvery(b, 30*time.Second, 2*time.Millisecond, what, cond)
}

func report(b *testing.B, samples []time.Duration) {
	b.Helper()
	if len(samples) == 0 {
		return
	}
	slices.Sort(samples)
	pct := func(p float64) time.Duration { return samples[min(len(samples)-1, int(p*float64(len(samples))))] }
	b.ReportMetric(float64(pct(0.50).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(pct(0.99).Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(samples[len(samples)-1].Microseconds())/1000, "max-ms")
	b.ReportMetric(float64(len(samples)), "samples")
	fmt.Printf("%s: %d samples, p50 %s, p99 %s\n", b.Name(), len(samples), pct(0.50).Round(time.Millisecond), pct(0.99).Round(time.Millisecond))
}
