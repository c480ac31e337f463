package plugin

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/testutil"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// judging is e carrying a candidate's shadow judgement, as a pod reports it.
func judging(e breakerconfig.ReportEntry, state string, opens, wouldRefuse int64) breakerconfig.ReportEntry {
	start := breakerconfig.NewTime(time.Now().Add(-time.Hour))
	open, enforcedOpen := breakerconfig.Duration(90*time.Second), breakerconfig.Duration(0)
	e.Candidate = &breakerconfig.CandidateEntry{State: state, Since: breakerconfig.NewTime(time.Now().Add(-time.Minute)),
		Opens: opens, WouldRefuse: wouldRefuse, StartTime: &start, TimeOpen: &open,
		Enforced: &breakerconfig.CandidateBaseline{TimeOpen: &enforcedOpen}}
	return e
}

// Issue 32's measure of done: ten pods whose too-tight candidate opened on a blip the
// enforced policy rode out; status.candidate says so with the fleet's opens and
// wouldRefuse, `candidate` compares the two, a promote of a version edited since fails
// saying so, and promote makes the candidate the spec and clears status.candidate.
func TestCandidateAcrossTenPodsAndPromote(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := newNamespace(t, "")
	createBreaker(t, ns, "payments", func(s *resiliencev1alpha1.CircuitBreakerSpec) {
		s.Candidate = &resiliencev1alpha1.CandidatePolicy{FailureRatePercent: ptr.To[int32](20), MinimumThroughput: ptr.To[int32](5)}
	})
	for i := range 10 {
		report(t, ns, fmt.Sprintf("app-%d", i), judging(entry("payments", resiliencev1alpha1.StateClosed, "Started"), breakerconfig.StateOpen, 1, 42))
	}
	testutil.Eventually(t, wait, "status.candidate of payments", func() error {
		c := getBreaker(t, ns, "payments").Status.Candidate
		if c == nil || c.Pods != 10 || c.State != resiliencev1alpha1.StateOpen || c.Open != 10 || c.Opens != 10 || c.WouldRefuse != 420 ||
			c.Enforced == nil || c.Enforced.Refused != 0 || c.TimeOpen == nil || c.TimeOpen.Duration != 90*time.Second {
			return fmt.Errorf("status.candidate %+v", c)
		}
		return nil
	})
	cb := getBreaker(t, ns, "payments")
	if cb.Status.State != resiliencev1alpha1.StateClosed {
		t.Errorf("the enforced state %q, want Closed: the candidate refuses nothing", cb.Status.State)
	}
	testutil.Eventually(t, wait, "a CandidateOpened Event", func() error {
		var evs corev1.EventList
		if err := k8sClient.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Reason == resiliencev1alpha1.EventCandidateOpened && e.InvolvedObject.Name == "payments" {
				return nil
			}
		}
		return fmt.Errorf("no %s Event among %d", resiliencev1alpha1.EventCandidateOpened, len(evs.Items))
	})

	if v := breakerView(cb, time.Now()).Candidate; v == nil || v.State != "Open" || v.Pods != 10 || v.WouldRefuse != 420 || v.Refused != 0 {
		t.Errorf("the dashboard's view of the candidate: %+v", v)
	}
	out, _, err := kubectlFusebox(ctx, "-n", ns, "candidate", "payments")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"failureRatePercent 50 → 20", "minimumThroughput 20 → 5", "on 10 pods",
		"0 refused", "420 would refuse", fmt.Sprintf("generation %d", cb.Generation)} {
		if !strings.Contains(out, want) {
			t.Errorf("candidate does not say %q:\n%s", want, out)
		}
	}

	// Someone edits the breaker after it was looked at: promoting what was seen fails.
	seen := cb.Generation
	patch := client.MergeFrom(cb.DeepCopy())
	cb.Spec.OpenTimeout = &metav1.Duration{Duration: time.Minute}
	if err := k8sClient.Patch(ctx, cb, patch); err != nil {
		t.Fatal(err)
	}
	_, _, err = kubectlFusebox(ctx, "-n", ns, "promote", "payments", "--generation", fmt.Sprint(seen))
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("changed since generation %d", seen)) {
		t.Fatalf("promote of an edited version: %v, want a refusal saying it changed", err)
	}
	if getBreaker(t, ns, "payments").Spec.Candidate == nil {
		t.Fatal("a refused promote removed the candidate")
	}

	out, _, err = kubectlFusebox(ctx, "-n", ns, "promote", "payments")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "the candidate is the enforced policy now") {
		t.Errorf("promote said %q", out)
	}
	s := getBreaker(t, ns, "payments").Spec
	if s.Candidate != nil || s.FailureRatePercent == nil || *s.FailureRatePercent != 20 || *s.MinimumThroughput != 5 || s.OpenTimeout.Duration != time.Minute {
		t.Errorf("after promote: %+v", s)
	}
	testutil.Eventually(t, wait, "status.candidate cleared", func() error {
		if c := getBreaker(t, ns, "payments").Status.Candidate; c != nil {
			return fmt.Errorf("status.candidate %+v", c)
		}
		return nil
	})
	if _, _, err := kubectlFusebox(ctx, "-n", ns, "promote", "payments"); err == nil || !strings.Contains(err.Error(), "no candidate policy") {
		t.Errorf("promote without a candidate: %v", err)
	}
}
