package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/testutil"
	"github.com/fusebox-dev/fusebox/pkg/breaker"
)

// wait bounds each wait for the operator and the instances to get somewhere: a wait
// returns as soon as its condition holds (well under a second on a quiet machine:
// BenchmarkPropagation), so the bound only says how long a loaded -race run may take
// before the test reports what never happened.
const wait = 30 * time.Second

// newBreaker creates a CircuitBreaker with short times, so a test can see an
// open circuit go half-open on the real clock.
func newBreaker(t testing.TB, ns, name string, scope resiliencev1alpha1.Scope) *resiliencev1alpha1.CircuitBreaker {
	t.Helper()
	cb := &resiliencev1alpha1.CircuitBreaker{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: resiliencev1alpha1.CircuitBreakerSpec{
			OpenTimeout:      &metav1.Duration{Duration: time.Second},
			SuccessThreshold: ptr.To[int32](1),
			Scope:            scope,
		},
	}
	if err := k8sClient.Create(context.Background(), cb); err != nil {
		t.Fatal(err)
	}
	return cb
}

func getBreaker(ns, name string) (*resiliencev1alpha1.CircuitBreaker, error) {
	var cb resiliencev1alpha1.CircuitBreaker
	err := k8sClient.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &cb)
	return &cb, err
}

func hasCondition(cb *resiliencev1alpha1.CircuitBreaker, conditionType string, status metav1.ConditionStatus) error {
	c := meta.FindStatusCondition(cb.Status.Conditions, conditionType)
	switch {
	case c == nil:
		return fmt.Errorf("no %s condition", conditionType)
	case c.Status != status || c.ObservedGeneration != cb.Generation:
		return fmt.Errorf("%s=%s (generation %d of %d): %s", conditionType, c.Status, c.ObservedGeneration, cb.Generation, c.Message)
	}
	return nil
}

func event(ns, name, reason string) (string, error) {
	var list eventsv1.EventList
	if err := k8sClient.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		return "", err
	}
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Reason == reason {
			return e.Note, nil
		}
	}
	return "", fmt.Errorf("no %s Event", reason)
}

// A probe after the open timeout: with successThreshold 1 a success closes.
func probe(t testing.TB, b *breaker.Breaker) {
	t.Helper()
	testutil.Eventually(t, wait, "probe admitted", func() error {
		return b.Execute(context.Background(), func(context.Context) error { return nil })
	})
}

func TestAnInstanceThatTripsOpensTheResource(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	newBreaker(t, ns, "payments", resiliencev1alpha1.ScopePod)
	apps := startInstances(t, ns, 3)
	for _, a := range apps {
		a.breaker("payments")
	}
	testutil.Eventually(t, wait, "every instance reports Closed", func() error {
		cb, err := getBreaker(ns, "payments")
		if err != nil {
			return err
		}
		if cb.Status.MemberCounts == nil || cb.Status.MemberCounts.Closed != 3 || cb.Status.State != resiliencev1alpha1.StateClosed {
			return fmt.Errorf("state %q counts %+v", cb.Status.State, cb.Status.MemberCounts)
		}
		return hasCondition(cb, resiliencev1alpha1.ConditionConfigApplied, metav1.ConditionTrue)
	})

	apps[1].breaker("payments").Trip()
	testutil.Eventually(t, wait, "the resource is Open", func() error {
		cb, err := getBreaker(ns, "payments")
		if err != nil {
			return err
		}
		if cb.Status.State != resiliencev1alpha1.StateOpen || cb.Status.MemberCounts.Open != 1 {
			return fmt.Errorf("state %q counts %+v", cb.Status.State, cb.Status.MemberCounts)
		}
		for _, m := range cb.Status.Members {
			if m.Pod == "app-1" && m.State != resiliencev1alpha1.StateOpen {
				return fmt.Errorf("app-1 reports %s", m.State)
			}
		}
		return hasCondition(cb, resiliencev1alpha1.ConditionOpen, metav1.ConditionTrue)
	})
	testutil.Eventually(t, wait, "the CircuitOpened Event names the pod", func() error {
		note, err := event(ns, "payments", resiliencev1alpha1.EventCircuitOpened)
		if err == nil && !strings.Contains(note, "app-1") {
			err = fmt.Errorf("note %q does not name app-1", note)
		}
		return err
	})
	if s := apps[0].breaker("payments").State(); s != breaker.Closed {
		t.Errorf("scope Pod: app-0 is %s; another pod's trip must not open it", s)
	}

	probe(t, apps[1].breaker("payments"))
	testutil.Eventually(t, wait, "the resource is Closed again", func() error {
		cb, err := getBreaker(ns, "payments")
		if err != nil {
			return err
		}
		if cb.Status.State != resiliencev1alpha1.StateClosed {
			return fmt.Errorf("state %q", cb.Status.State)
		}
		if err := hasCondition(cb, resiliencev1alpha1.ConditionOpen, metav1.ConditionFalse); err != nil {
			return err
		}
		_, err = event(ns, "payments", resiliencev1alpha1.EventCircuitClosed)
		return err
	})
}

func TestConfigChangesReachEveryInstanceAndConfigAppliedFollows(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	cb := newBreaker(t, ns, "search", resiliencev1alpha1.ScopePod)
	apps := startInstances(t, ns, 3)
	for _, a := range apps {
		a.breaker("search")
	}
	apps[2].breaker("search").Trip()

	patch := client.MergeFrom(cb.DeepCopy())
	cb.Spec.FailureRatePercent = ptr.To[int32](20)
	cb.Spec.OpenTimeout = &metav1.Duration{Duration: time.Hour}
	if err := k8sClient.Patch(context.Background(), cb, patch); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, wait, "every instance runs the new policy", func() error {
		for _, a := range apps {
			if p := a.breaker("search").Policy(); p.FailureRatio != 0.2 || p.OpenTimeout != time.Hour {
				return fmt.Errorf("%s runs %+v", a.pod, p)
			}
		}
		return nil
	})
	if s := apps[2].breaker("search").State(); s != breaker.Open {
		t.Errorf("app-2 is %s after the update; an open circuit must stay open", s)
	}
	testutil.Eventually(t, wait, "ConfigApplied for generation 2", func() error {
		cb, err := getBreaker(ns, "search")
		if err != nil {
			return err
		}
		if cb.Generation != 2 || cb.Status.MemberCounts == nil || cb.Status.MemberCounts.OnLatestConfig != 3 {
			return fmt.Errorf("generation %d counts %+v", cb.Generation, cb.Status.MemberCounts)
		}
		return hasCondition(cb, resiliencev1alpha1.ConditionConfigApplied, metav1.ConditionTrue)
	})
}

func TestFleetScopeOneTripOpensAllAndRecoveryClosesAll(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	newBreaker(t, ns, "fleet", resiliencev1alpha1.ScopeFleet)
	apps := startInstances(t, ns, 3)
	for _, a := range apps {
		a.breaker("fleet")
	}
	testutil.Eventually(t, wait, "every instance reports", func() error {
		cb, err := getBreaker(ns, "fleet")
		if err == nil && (cb.Status.MemberCounts == nil || cb.Status.MemberCounts.Reporting != 3) {
			err = fmt.Errorf("counts %+v", cb.Status.MemberCounts)
		}
		return err
	})

	apps[0].breaker("fleet").Trip()
	openedAt := apps[0].breaker("fleet").Verdict().Since
	testutil.Eventually(t, wait, "every instance is open", func() error {
		for _, a := range apps {
			v := a.breaker("fleet").Verdict()
			if v.State != breaker.Open {
				return fmt.Errorf("%s is %s", a.pod, v.State)
			}
			if d := v.Since.Sub(openedAt).Abs(); d > time.Millisecond {
				return fmt.Errorf("%s opened at %s, %s from the fleet's %s", a.pod, v.Since, d, openedAt)
			}
		}
		return nil
	})
	if c := apps[1].breaker("fleet").Counts(); c.Calls != 0 {
		t.Errorf("app-1 counts %+v: counters are never shared", c)
	}

	// After the open timeout, app-2's probe succeeds and closes the fleet.
	probe(t, apps[2].breaker("fleet"))
	testutil.Eventually(t, wait, "every instance is closed", func() error {
		for _, a := range apps {
			if s := a.breaker("fleet").State(); s != breaker.Closed {
				return fmt.Errorf("%s is %s", a.pod, s)
			}
		}
		cb, err := getBreaker(ns, "fleet")
		if err == nil && cb.Status.State != resiliencev1alpha1.StateClosed {
			err = fmt.Errorf("the resource is %q", cb.Status.State)
		}
		return err
	})
}
