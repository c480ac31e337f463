package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/testutil"
	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/kube"
)

// entryOf returns the entry of breaker name in pod's BreakerReport.
func entryOf(ns, pod, name string) (resiliencev1alpha1.BreakerReportEntry, error) {
	var r resiliencev1alpha1.BreakerReport
	if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: pod}, &r); err != nil {
		return resiliencev1alpha1.BreakerReportEntry{}, err
	}
	for _, e := range r.Breakers {
		if e.Name == name {
			return e, nil
		}
	}
	return resiliencev1alpha1.BreakerReportEntry{}, fmt.Errorf("pod %s reports no %s", pod, name)
}

// publishedConfig returns the config the operator publishes for name.
func publishedConfig(ns, name string) (breakerconfig.Config, error) {
	var cm corev1.ConfigMap
	if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: breakerconfig.ConfigMapName}, &cm); err != nil {
		return breakerconfig.Config{}, err
	}
	return breakerconfig.Parse([]byte(cm.Data[breakerconfig.Key(name)]))
}

// publishedVerdict returns the fleet verdict the operator publishes for name, nil for none.
func publishedVerdict(ns, name string) (*breakerconfig.Verdict, error) {
	c, err := publishedConfig(ns, name)
	if err != nil {
		return nil, err
	}
	return c.Verdict, nil
}

// setSpec patches the CircuitBreaker name with change.
func setSpec(t *testing.T, ns, name string, change func(*resiliencev1alpha1.CircuitBreakerSpec)) {
	t.Helper()
	cb, err := getBreaker(ns, name)
	if err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(cb.DeepCopy())
	change(&cb.Spec)
	if err := k8sClient.Patch(context.Background(), cb, patch); err != nil {
		t.Fatal(err)
	}
}

// A pod that starts while the fleet is open (a scale-up, a rolling update) adopts the
// open verdict and reports it as adopted: it neither closes the fleet nor counts as one
// that opened it.
func TestAFreshInstanceDoesNotCloseAnOpenFleet(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	cb := newBreaker(t, ns, "inventory", resiliencev1alpha1.ScopeFleet)
	setSpec(t, ns, cb.Name, func(s *resiliencev1alpha1.CircuitBreakerSpec) {
		s.OpenTimeout = &metav1.Duration{Duration: time.Hour} // nothing probes in this test
	})
	apps := startInstances(t, ns, 3)
	for _, a := range apps {
		a.breaker(cb.Name)
	}
	testutil.Eventually(t, wait, "every instance reports", func() error {
		cb, err := getBreaker(ns, cb.Name)
		if err == nil && (cb.Status.MemberCounts == nil || cb.Status.MemberCounts.Reporting != 3 || cb.Status.ObservedGeneration != cb.Generation) {
			err = fmt.Errorf("counts %+v", cb.Status.MemberCounts)
		}
		return err
	})

	apps[0].breaker(cb.Name).Trip()
	testutil.Eventually(t, wait, "the fleet is open on every instance", func() error {
		for _, a := range apps {
			if s := a.breaker(cb.Name).State(); s != breaker.Open {
				return fmt.Errorf("%s is %s", a.pod, s)
			}
		}
		cb, err := getBreaker(ns, cb.Name)
		if err != nil {
			return err
		}
		return hasCondition(cb, resiliencev1alpha1.ConditionOpen, metav1.ConditionTrue)
	})

	// Scale-up: a new pod whose application creates the breaker as it starts, before its
	// config has arrived.
	fresh := startInstance(t, ns, "app-3", nil)
	fresh.breaker(cb.Name)
	testutil.Eventually(t, wait, "the fresh instance is counted, open", func() error {
		cb, err := getBreaker(ns, cb.Name)
		if err != nil {
			return err
		}
		if c := cb.Status.MemberCounts; c == nil || c.Reporting != 4 || c.Open != 4 {
			return fmt.Errorf("counts %+v", c)
		}
		return nil
	})
	e, err := entryOf(ns, "app-3", cb.Name)
	if err != nil {
		t.Fatal(err)
	}
	if e.State != resiliencev1alpha1.StateOpen || e.Reason != breakerconfig.ReasonAdopted {
		t.Errorf("app-3 reports %s (%s), want Open (Adopted)", e.State, e.Reason)
	}
	// The count moves just after the API server answers: the operator may have read the
	// report first.
	testutil.Eventually(t, wait, "app-3 counts its write", func() error {
		if fresh.agent.Stats().Writes == 0 {
			return fmt.Errorf("no write counted")
		}
		return nil
	})
	if n := fresh.agent.Stats().Writes; n != 1 {
		t.Errorf("app-3 wrote its report %d times, want once: open from its first report", n)
	}
	// And it stays that way: nothing the fresh pod said closes the fleet.
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		cb, err := getBreaker(ns, cb.Name)
		if err != nil {
			t.Fatal(err)
		}
		if err := hasCondition(cb, resiliencev1alpha1.ConditionOpen, metav1.ConditionTrue); err != nil || cb.Status.State != resiliencev1alpha1.StateOpen {
			t.Fatalf("after app-3 joined: state %s, %v", cb.Status.State, err)
		}
		for _, a := range append(apps, fresh) {
			if s := a.breaker(cb.Name).State(); s != breaker.Open {
				t.Fatalf("%s is %s after app-3 joined", a.pod, s)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A CircuitBreaker created ForcedOpen and then set to Enforce: a Closed verdict a pod
// earned before another pod's breaker was forced open does not close that breaker. The
// Closed comes from a pod whose report reaches the API server only after the switch (its
// Pod object appears late), so the forced pod meets that verdict for the first time
// under Enforce.
func TestForcedOpenThenEnforceRefusesAnOlderClosedVerdict(t *testing.T) {
	t.Parallel()
	if !coreRefusesOlderClosedAfterForcedOpen() {
		t.Skip("SKIPPED: needs the pkg/breaker half of issue 9 (being done on branch core, not merged into fleet yet): " +
			"a breaker created ForcedOpen and set to Enforce still adopts a Closed verdict older than its open period, " +
			"so this end-to-end spec would fail for that reason alone. It runs by itself once the fix is merged.")
	}
	ns := newNamespace(t)
	const name = "ledger"
	cb := &resiliencev1alpha1.CircuitBreaker{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: resiliencev1alpha1.CircuitBreakerSpec{
			OpenTimeout: &metav1.Duration{Duration: time.Hour},
			Scope:       resiliencev1alpha1.ScopeFleet,
			Mode:        resiliencev1alpha1.ModeForcedOpen,
		},
	}
	if err := k8sClient.Create(context.Background(), cb); err != nil {
		t.Fatal(err)
	}

	// Pod "early" runs on a config of its own (a mounted directory it never sees updated:
	// Enforce, a 1s open timeout, one probe closes) and reports through the API, but its
	// Pod does not exist yet, so its report is refused and retried. It opens on its own
	// and its probe closes it: an earned Closed, dated now.
	dir := t.TempDir()
	own := kube.ConfigOf(name, 1, breaker.Policy{
		OpenTimeout: time.Second, Window: 10 * time.Second, FailureRatio: 0.5,
		MinimumThroughput: 20, SuccessThreshold: 1, HalfOpenPermittedCalls: 1,
	}, breakerconfig.ScopeFleet)
	doc, err := breakerconfig.Marshal(own)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, breakerconfig.Key(name)), doc, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	early, err := kube.Connect(ctx, kube.Options{
		Config: cfg, Namespace: ns, Pod: "early", ConfigDir: dir,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); <-early.Done() })
	eb := early.Registry().Get(name)
	testutil.Eventually(t, wait, "early runs its own config", func() error {
		if p := eb.Policy(); p.SuccessThreshold != 1 {
			return fmt.Errorf("early runs %+v", p)
		}
		return nil
	})
	eb.Trip()
	probe(t, eb)
	closedAt := eb.Verdict().Since
	if s := eb.State(); s != breaker.Closed {
		t.Fatalf("early is %s after its probe, want closed", s)
	}

	// Then a pod starts while the breaker is ForcedOpen; its application creates the
	// breaker once the config is there, so it is created forced open, after closedAt. The
	// operator has published that config first: a pod that starts before it would create
	// the breaker with the default policy, closed.
	testutil.Eventually(t, wait, "the operator publishes ForcedOpen", func() error {
		c, err := publishedConfig(ns, name)
		if err == nil && c.Mode != breakerconfig.ModeForcedOpen {
			err = fmt.Errorf("published mode %q", c.Mode)
		}
		return err
	})
	time.Sleep(10 * time.Millisecond)
	forced := startInstance(t, ns, "forced", nil)
	testutil.Eventually(t, wait, "forced has its config", func() error {
		if forced.agent.Stats().ConfigApplies == 0 {
			return fmt.Errorf("no config yet")
		}
		return nil
	})
	fb := forced.breaker(name)
	if v := fb.Verdict(); v.State != breaker.Open || !v.Since.After(closedAt) {
		t.Fatalf("forced is %s since %v, want open since after %v", v.State, v.Since, closedAt)
	}
	testutil.Eventually(t, wait, "forced reports Open (Forced)", func() error {
		e, err := entryOf(ns, "forced", name)
		if err == nil && (e.State != resiliencev1alpha1.StateOpen || e.Reason != breakerconfig.ReasonForced) {
			err = fmt.Errorf("forced reports %s (%s)", e.State, e.Reason)
		}
		return err
	})

	setSpec(t, ns, name, func(s *resiliencev1alpha1.CircuitBreakerSpec) { s.Mode = resiliencev1alpha1.ModeEnforce })
	testutil.Eventually(t, wait, "forced runs Enforce", func() error {
		if m := fb.Policy().Mode; m != breaker.ModeEnforce {
			return fmt.Errorf("forced runs %s", m)
		}
		return nil
	})

	// early's Pod appears: its report, Closed by its probes, reaches the operator, which
	// publishes that Closed verdict (not every pod is closed).
	adoptions := forced.agent.Stats().Adoptions
	if err := k8sClient.Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "early"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 3*wait, "the operator publishes early's Closed and forced has met it", func() error {
		v, err := publishedVerdict(ns, name)
		switch {
		case err != nil:
			return err
		case v == nil || v.State != breakerconfig.StateClosed || !v.Since.Equal(closedAt.UTC().Truncate(time.Millisecond)):
			return fmt.Errorf("published verdict %+v, want Closed since %v", v, closedAt)
		case forced.agent.Stats().Adoptions == adoptions:
			return fmt.Errorf("forced has not been handed the verdict yet")
		}
		return nil
	})
	if v := fb.Verdict(); v.State != breaker.Open {
		t.Errorf("forced is %s since %v after being handed a Closed verdict of %v, older than its forced open period; want still open", v.State, v.Since, closedAt)
	}
	e, err := entryOf(ns, "forced", name)
	if err != nil {
		t.Fatal(err)
	}
	if e.State != resiliencev1alpha1.StateOpen {
		t.Errorf("forced reports %s (%s), want still Open", e.State, e.Reason)
	}
}

// coreRefusesOlderClosedAfterForcedOpen tells whether pkg/breaker has the rule this spec
// needs from it (docs/design.md §5.12): a breaker created ForcedOpen, set to Enforce, refuses a
// Closed verdict from before it was forced open.
func coreRefusesOlderClosedAfterForcedOpen() bool {
	p := breaker.DefaultPolicy()
	p.Mode = breaker.ModeForcedOpen
	b, err := breaker.New("probe", p)
	if err != nil {
		panic(err)
	}
	p.Mode = breaker.ModeEnforce
	if err := b.Update(p); err != nil {
		panic(err)
	}
	b.Adopt(breaker.Verdict{State: breaker.Closed, Since: time.Now().Add(-time.Minute)})
	return b.State() == breaker.Open
}

// A CircuitBreaker deleted and created again under the same name is a new breaker: the
// pods report it afresh (its config carries the new UID and generation), and what they
// decided about the old one, even an Open they earned, does not open the new one nor
// become its published verdict. The API server keeps creationTimestamp in whole
// seconds, and a state reached within the creation's second counts as the new breaker's
// (docs/config-format.md), so the re-creation happens in the second after the trip.
func TestARecreatedBreakerIsNotOpenedByTheOldOnesVerdicts(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	cb := newBreaker(t, ns, "orders", resiliencev1alpha1.ScopeFleet)
	setSpec(t, ns, cb.Name, func(s *resiliencev1alpha1.CircuitBreakerSpec) {
		s.OpenTimeout = &metav1.Duration{Duration: time.Hour}
	})
	apps := startInstances(t, ns, 3)
	for _, a := range apps {
		a.breaker(cb.Name)
	}
	testutil.Eventually(t, wait, "every instance reports", func() error {
		cb, err := getBreaker(ns, cb.Name)
		if err == nil && (cb.Status.MemberCounts == nil || cb.Status.MemberCounts.Reporting != 3) {
			err = fmt.Errorf("counts %+v", cb.Status.MemberCounts)
		}
		return err
	})

	// Trip, delete, and create again as soon as the next second begins.
	apps[0].breaker(cb.Name).Trip()
	old, err := getBreaker(ns, cb.Name)
	if err != nil {
		t.Fatal(err)
	}
	if err := k8sClient.Delete(context.Background(), old); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
	again := &resiliencev1alpha1.CircuitBreaker{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cb.Name},
		Spec:       *old.Spec.DeepCopy(),
	}
	if err := k8sClient.Create(context.Background(), again); err != nil {
		t.Fatal(err)
	}
	tripped := apps[0].breaker(cb.Name).Verdict().Since
	t.Logf("tripped at %s, re-created with creationTimestamp %s", tripped.Format(time.RFC3339Nano), again.CreationTimestamp.Format(time.RFC3339Nano))

	testutil.Eventually(t, wait, "every pod reports the new CircuitBreaker", func() error {
		for _, a := range apps {
			e, err := entryOf(ns, a.pod, cb.Name)
			if err != nil {
				return err
			}
			if e.ConfigGeneration != again.Generation {
				return fmt.Errorf("%s reports generation %d", a.pod, e.ConfigGeneration)
			}
		}
		cb, err := getBreaker(ns, cb.Name)
		if err == nil && (cb.UID != again.UID || cb.Status.MemberCounts == nil || cb.Status.MemberCounts.Reporting != 3 || cb.Status.ObservedGeneration != cb.Generation) {
			err = fmt.Errorf("status %+v", cb.Status)
		}
		return err
	})
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		cb, err := getBreaker(ns, cb.Name)
		if err != nil {
			t.Fatal(err)
		}
		if err := hasCondition(cb, resiliencev1alpha1.ConditionOpen, metav1.ConditionTrue); err == nil {
			t.Fatalf("the re-created CircuitBreaker was opened by a report about the old one: %s",
				meta.FindStatusCondition(cb.Status.Conditions, resiliencev1alpha1.ConditionOpen).Message)
		}
		if v, err := publishedVerdict(ns, cb.Name); err != nil || v != nil {
			t.Fatalf("the re-created CircuitBreaker publishes verdict %+v (%v), want none", v, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The other pods may or may not be open: the old CircuitBreaker's verdict may have
	// reached them before it was deleted, and a pod keeps its breaker's state across a
	// re-creation (it forgets only which verdict it adopted).
}
