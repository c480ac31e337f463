package plugin

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"k8s.io/utils/ptr"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/testutil"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// withTraffic is e carrying a window's traffic, as a pod reports it for a breaker with a
// retry budget or throttling.
func withTraffic(e breakerconfig.ReportEntry, requests, accepts, retries, throttled int64) breakerconfig.ReportEntry {
	e.Requests, e.Accepts, e.Retries, e.Throttled = &requests, &accepts, &retries, &throttled
	return e
}

// withConcurrency is e carrying a window's concurrency figures, as a pod reports them for
// a breaker with spec.concurrency.
func withConcurrency(e breakerconfig.ReportEntry, peak, limited int64) breakerconfig.ReportEntry {
	e.InFlightPeak, e.Limited = &peak, &limited
	return e
}

// fleetPolicies gives a breaker both fleet policies of issue 22.
func fleetPolicies(s *resiliencev1alpha1.CircuitBreakerSpec) {
	s.RetryBudget = &resiliencev1alpha1.RetryBudget{Percent: ptr.To[int32](20), MinPerSecond: ptr.To[int32](10)}
	s.Throttle = &resiliencev1alpha1.Throttle{K: ptr.To(2.0)}
}

// The fleet's retry ratio and throttle rejection ratio, in the table and in `status NAME`.
func TestStatusShowsTheFleetRatios(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "")
	createBreaker(t, ns, "payments", fleetPolicies)
	createBreaker(t, ns, "plain", nil)
	for _, pod := range []string{"app-0", "app-1"} {
		report(t, ns, pod, withTraffic(entry("payments", resiliencev1alpha1.StateClosed, "Started"), 150, 75, 15, 30),
			entry("plain", resiliencev1alpha1.StateClosed, "Started"))
	}
	testutil.Eventually(t, wait, "status.traffic of payments", func() error {
		tr := getBreaker(t, ns, "payments").Status.Traffic
		if tr == nil || tr.Requests != 300 {
			return fmt.Errorf("traffic %+v", tr)
		}
		return nil
	})
	out, _, err := kubectlFusebox(ctx, "-n", ns, "status")
	if err != nil {
		t.Fatal(err)
	}
	// 30 retries of 270 first attempts; 60 of 300 requests throttled.
	if got, want := strings.Join(row(t, out, "payments")[6:8], " "), "11% 20%"; got != want {
		t.Errorf("payments' RETRIES THROTTLED: got %q, want %q\n%s", got, want, out)
	}
	if got, want := strings.Join(row(t, out, "plain")[6:8], " "), "- -"; got != want {
		t.Errorf("plain's RETRIES THROTTLED: got %q, want %q\n%s", got, want, out)
	}
	detail, _, err := kubectlFusebox(ctx, "-n", ns, "status", "payments")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`Retry budget:\s+20% \+ 10/s, the per-second floor shared by 2 pods\n`,
		`Retries:\s+11% of first attempts \(30 retries of 300 requests\)\n`,
		`Throttle:\s+k = 2\n`,
		`Throttled:\s+20% of requests \(60 of 300; 150 accepted\)\n`,
	} {
		if !regexp.MustCompile(want).MatchString(detail) {
			t.Errorf("status payments does not say %q:\n%s", want, detail)
		}
	}
}

// The fleet's limit on calls in flight in `status NAME`: before a pod is counted, then
// divided among the two that report, with their peaks and refusals added up.
func TestStatusShowsTheFleetConcurrency(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "")
	createBreaker(t, ns, "inventory", func(s *resiliencev1alpha1.CircuitBreakerSpec) {
		s.Concurrency = &resiliencev1alpha1.Concurrency{MaxInFlight: 10}
	})
	detail, _, err := kubectlFusebox(ctx, "-n", ns, "status", "inventory")
	if err != nil {
		t.Fatal(err)
	}
	if want := `Concurrency:\s+10 in flight for the fleet, not divided yet \(no pod counted\)\n`; !regexp.MustCompile(want).MatchString(detail) {
		t.Errorf("status inventory, no pod yet, does not say %q:\n%s", want, detail)
	}
	for _, pod := range []string{"app-0", "app-1"} {
		report(t, ns, pod, withConcurrency(entry("inventory", resiliencev1alpha1.StateClosed, "Started"), 3, 4))
	}
	testutil.Eventually(t, wait, "status.concurrency of inventory", func() error {
		if c := getBreaker(t, ns, "inventory").Status.Concurrency; c == nil || c.Pods != 2 || c.InFlight != 6 {
			return fmt.Errorf("concurrency %+v", c)
		}
		return nil
	})
	if detail, _, err = kubectlFusebox(ctx, "-n", ns, "status", "inventory"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`Concurrency:\s+10 in flight for the fleet: 5 a pod, over 2 pods\n`,
		`In flight:\s+6 at the pods' peaks added up; 8 calls refused by the limit\n`,
	} {
		if !regexp.MustCompile(want).MatchString(detail) {
			t.Errorf("status inventory does not say %q:\n%s", want, detail)
		}
	}
}
