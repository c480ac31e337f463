package controller

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// BenchmarkAggregate is one status computation (aggregate) of a breaker that 5,000 pods
// report, as the status controller makes it on every reconcile of the namespace: a
// throttled breaker whose pods report their traffic, and a breaker Group whose pods each
// name their worst keys. It builds its members with struct literals only, so that the
// same file runs against an older tree for a side-by-side figure (docs/benchmarks.md).
func BenchmarkAggregate(b *testing.B) {
	const pods = 5000
	k := 2.0
	since := metav1.NewTime(time.Unix(1_800_000_000, 0))
	throttled := &resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "b", Generation: 1},
		Spec: resiliencev1alpha1.CircuitBreakerSpec{Throttle: &resiliencev1alpha1.Throttle{K: &k}}}
	plain := &resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "b", Generation: 1}}
	for _, tc := range []struct {
		name  string
		cb    *resiliencev1alpha1.CircuitBreaker
		entry func(i int) resiliencev1alpha1.BreakerReportEntry
	}{
		{"traffic", throttled, func(i int) resiliencev1alpha1.BreakerReportEntry {
			requests, accepts, retries, none := int64(900+i%200), int64(400+i%300), int64(i%50), int64(0)
			return resiliencev1alpha1.BreakerReportEntry{Name: "b", State: resiliencev1alpha1.StateClosed, Reason: "Started", Since: since,
				ConfigGeneration: 1, Requests: &requests, Accepts: &accepts, Retries: &retries, Throttled: &none}
		}},
		{"group", plain, func(i int) resiliencev1alpha1.BreakerReportEntry {
			return resiliencev1alpha1.BreakerReportEntry{Name: "b", State: resiliencev1alpha1.StateClosed, Reason: "Started", Since: since,
				ConfigGeneration: 1, Keys: &resiliencev1alpha1.KeySummary{Keys: int32(200 + i%100), Open: int32(i % 3),
					Worst: []string{fmt.Sprintf("host-%d.example", i%7), fmt.Sprintf("host-%d.example", i%11)}}}
		}},
	} {
		members := make([]member, pods)
		for i := range members {
			members[i] = member{pod: fmt.Sprintf("app-%04d", i), entry: tc.entry(i), since: since.Time}
		}
		b.Run(fmt.Sprintf("%s/pods=%d", tc.name, pods), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = aggregate(tc.cb, members)
			}
		})
	}
}
