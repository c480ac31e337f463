package kube_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/kube"
)

// TestReasons: each way a breaker reaches its state is reported as its reason, so that
// the operator can tell what a pod earned from what it adopted or was forced into.
func TestReasons(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	p := testPolicy() // opens at half of two calls; 30s open; two probes close
	long := p
	long.OpenTimeout = time.Hour // the adopted verdict must not time out in this test
	forced := p
	forced.Mode = breaker.ModeForcedOpen
	clock := newFakeClock()
	adoptedSince := clock.Now().Add(-5 * time.Second)
	data := map[string]string{
		"adopted":    render(t, "adopted", 1, long, "Fleet", &breakerconfig.Verdict{State: "Open", Since: adoptedSince}),
		"forced":     render(t, "forced", 1, forced, "Pod", nil),
		"forcedlate": render(t, "forcedlate", 1, forced, "Pod", nil),
	}
	early := []string{"started", "tripped", "manual", "probefailed", "probesok", "timedout", "adopted", "forced"}
	for _, name := range early {
		if _, ok := data[name]; !ok {
			data[name] = render(t, name, 1, p, "Pod", nil)
		}
	}
	keyed := map[string]string{}
	for name, doc := range data {
		keyed[breakerconfig.Key(name)] = doc
	}
	writeConfigMap(t, ns, keyed)

	// Every breaker but forcedlate exists from the start, on the default policy until the
	// config arrives; forcedlate is created after, on its published ForcedOpen policy, and
	// so never moves.
	in := startInstance(t, ns, "a", instanceOptions{clock: clock, breakers: early})
	eventually(t, propagation, func() error {
		_, es, err := reportOf(ns, "a")
		if err == nil && len(es) != len(early) {
			err = fmt.Errorf("%d entries, want %d", len(es), len(early))
		}
		return err
	})
	late := in.reg.Get("forcedlate")
	if s := late.State(); s != breaker.Open {
		t.Fatalf("forcedlate created %v, want open (ForcedOpen)", s)
	}

	b := in.reg.Get
	start := clock.Now()
	for _, name := range []string{"probefailed", "probesok", "timedout"} {
		b(name).Trip()
	}
	clock.Advance(31 * time.Second) // past their open timeout
	_ = b("tripped").Execute(context.Background(), fail)
	_ = b("tripped").Execute(context.Background(), fail)
	b("manual").Trip()
	if s := b("timedout").State(); s != breaker.HalfOpen {
		t.Fatalf("timedout: %v, want half-open", s)
	}
	_ = b("probefailed").Execute(context.Background(), fail)
	_ = b("probesok").Execute(context.Background(), ok)
	_ = b("probesok").Execute(context.Background(), ok)

	want := map[string]struct {
		state  resiliencev1alpha1.State
		reason string
		since  time.Time
	}{
		"started":     {resiliencev1alpha1.StateClosed, breakerconfig.ReasonStarted, time.Time{}},
		"tripped":     {resiliencev1alpha1.StateOpen, breakerconfig.ReasonTripped, clock.Now()},
		"manual":      {resiliencev1alpha1.StateOpen, breakerconfig.ReasonManual, clock.Now()},
		"probefailed": {resiliencev1alpha1.StateOpen, breakerconfig.ReasonProbeFailed, clock.Now()},
		"probesok":    {resiliencev1alpha1.StateClosed, breakerconfig.ReasonProbesSucceeded, clock.Now()},
		// Half-open from the end of its open period, not from when State looked.
		"timedout":   {resiliencev1alpha1.StateHalfOpen, breakerconfig.ReasonTimedOut, start.Add(breaker.DefaultPolicy().OpenTimeout)},
		"adopted":    {resiliencev1alpha1.StateOpen, breakerconfig.ReasonAdopted, adoptedSince},
		"forced":     {resiliencev1alpha1.StateOpen, breakerconfig.ReasonForced, time.Time{}},
		"forcedlate": {resiliencev1alpha1.StateOpen, breakerconfig.ReasonForced, start},
	}
	eventually(t, propagation, func() error {
		for name, w := range want {
			err := memberIs(ns, name, "a", func(e resiliencev1alpha1.BreakerReportEntry) error {
				if e.State != w.state || e.Reason != w.reason {
					return fmt.Errorf("%s (%s), want %s (%s)", e.State, e.Reason, w.state, w.reason)
				}
				if !w.since.IsZero() && !e.Since.Time.Equal(w.since) {
					return fmt.Errorf("since %v, want %v", e.Since.Time, w.since)
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	if s := in.agent.Stats(); s.WriteFailures != 0 {
		t.Errorf("stats %+v: some writes failed", s)
	}
}

// TestTransitionsAreCoalesced: a burst of transitions costs a few writes of the report,
// not one each, and the report ends on the last state.
func TestTransitionsAreCoalesced(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	names := []string{"x", "y", "z"}
	data := map[string]string{}
	for _, n := range names {
		data[breakerconfig.Key(n)] = render(t, n, 1, testPolicy(), "Pod", nil)
	}
	writeConfigMap(t, ns, data)
	clock := newFakeClock()
	in := startInstance(t, ns, "a", instanceOptions{clock: clock, breakers: names, passUID: true})
	eventually(t, propagation, func() error {
		for _, n := range names {
			if err := memberIs(ns, n, "a", wantEntry(resiliencev1alpha1.StateClosed, 1)); err != nil {
				return err
			}
		}
		return nil
	})
	idle(t, in.agent)
	before := in.agent.Stats().Writes

	// About 600 transitions: every round lets the open period end (open → half-open) and
	// trips again (half-open → open). Trip on a circuit still open would be none.
	const rounds = 100
	for range rounds {
		clock.Advance(testPolicy().OpenTimeout)
		for _, n := range names {
			in.reg.Get(n).Trip()
		}
	}
	last := clock.Now()
	eventually(t, propagation, func() error {
		for _, n := range names {
			err := memberIs(ns, n, "a", func(e resiliencev1alpha1.BreakerReportEntry) error {
				if e.State != resiliencev1alpha1.StateOpen || e.Reason != breakerconfig.ReasonManual || !e.Since.Time.Equal(last) {
					return fmt.Errorf("want Open (Manual) since %v", last)
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	// What the writer does meanwhile is up to the scheduler: a quiet machine takes 1 to
	// 3 writes, a loaded one that stretches the loop over more of the writer's wake-ups
	// a few more (6 under a 5,000-pod benchmark beside it). A few dozen is still
	// coalescing; one a transition, hundreds, is not.
	idle(t, in.agent)
	writes := in.agent.Stats().Writes - before
	transitions := int64((2*rounds - 1) * len(names))
	t.Logf("%d transitions written in %d writes", transitions, writes)
	if writes < 1 || writes > transitions/20 {
		t.Errorf("%d transitions cost %d writes of the report, want 1 to %d", transitions, writes, transitions/20)
	}
}

// TestPodReadOnceForItsUID: without Options.PodUID the agent reads its Pod for the UID its
// report is owned by. While that Pod cannot be read the report is not written, and the
// agent says why and keeps trying; once it can, the report is written, owned by that Pod.
func TestPodReadOnceForItsUID(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	writeConfigMap(t, ns, map[string]string{"solo.json": render(t, "solo", 2, testPolicy(), "Pod", nil)})
	in := startInstance(t, ns, "a", instanceOptions{breakers: []string{"solo"}, noPod: true})
	eventually(t, propagation, func() error {
		s := in.agent.Stats()
		if s.Rejected < 1 || !strings.Contains(s.LastWriteError, "POD_UID") || !strings.Contains(s.LastWriteError, "not found") {
			return fmt.Errorf("stats %+v: want the missing Pod counted as a refusal and named", s)
		}
		return nil
	})
	in.reg.Get("solo").Trip() // meanwhile: the report to write changes, and is not lost
	uid := createPod(t, ns, "a")
	eventually(t, propagation, func() error {
		return memberIs(ns, "solo", "a", wantReason(resiliencev1alpha1.StateOpen, breakerconfig.ReasonManual))
	})
	rep, _, err := reportOf(ns, "a")
	if err != nil {
		t.Fatal(err)
	}
	if o := rep.OwnerReferences; len(o) != 1 || o[0].UID != uid || o[0].Kind != "Pod" || o[0].Name != "a" {
		t.Errorf("owner references %+v, want the Pod a (uid %s)", o, uid)
	}
	idle(t, in.agent)
	if s := in.agent.Stats(); s.LastWriteError != "" || s.Writes != 1 {
		t.Errorf("stats %+v: want one write and no error left", s)
	}
	if n := strings.Count(in.logs.String(), "refused this pod's breaker report"); n != 1 {
		t.Errorf("the refusal was logged %d times, want once:\n%s", n, in.logs)
	}
}

// TestRefusedReportIsRetried: a report the API server refuses (here an admission policy
// of the test's own, bound to its namespace) is retried, counted and explained, and
// written as it stands once the refusal is lifted; the breakers work throughout.
func TestRefusedReportIsRetried(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	ctx := context.Background()
	const refusal = "reports are refused in this namespace by the test"
	vap := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "refuse-reports-" + ns},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule: admissionregistrationv1.Rule{
						APIGroups: []string{breakerconfig.Group}, APIVersions: []string{"*"}, Resources: []string{breakerconfig.ReportResource},
					},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{Expression: "false", Message: refusal}},
		},
	}
	must(t, k8sClient.Create(ctx, vap))
	t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), vap) })
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: vap.Name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        vap.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns},
			}},
		},
	}
	must(t, k8sClient.Create(ctx, binding))
	t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), binding) })
	// A policy takes a moment to be enforced: wait until a dry run is refused.
	probe := &resiliencev1alpha1.BreakerReport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "a"}}
	eventually(t, propagation, func() error {
		err := k8sClient.Create(ctx, probe.DeepCopy(), client.DryRunAll)
		if err == nil || !strings.Contains(err.Error(), refusal) {
			return fmt.Errorf("dry run: %v, want the test's refusal", err)
		}
		return nil
	})

	writeConfigMap(t, ns, map[string]string{"held.json": render(t, "held", 1, testPolicy(), "Pod", nil)})
	in := startInstance(t, ns, "a", instanceOptions{breakers: []string{"held"}, passUID: true})
	eventually(t, propagation, func() error {
		s := in.agent.Stats()
		if s.Rejected < 2 || !strings.Contains(s.LastWriteError, refusal) {
			return fmt.Errorf("stats %+v: want the refusal retried and explained", s)
		}
		return nil
	})
	b := in.reg.Get("held")
	b.Trip()
	if err := b.Execute(ctx, ok); !errors.Is(err, breaker.ErrOpen) {
		t.Errorf("call on the tripped breaker while its report is refused: %v, want ErrOpen", err)
	}
	if _, _, err := reportOf(ns, "a"); !apierrors.IsNotFound(err) {
		t.Fatalf("report of a refused pod: %v, want none", err)
	}

	must(t, k8sClient.Delete(ctx, binding))
	eventually(t, 2*propagation, func() error {
		return memberIs(ns, "held", "a", wantReason(resiliencev1alpha1.StateOpen, breakerconfig.ReasonManual))
	})
	idle(t, in.agent)
	s := in.agent.Stats()
	if s.LastWriteError != "" || s.Writes != 1 || s.WriteFailures != s.Rejected {
		t.Errorf("stats %+v: want one write after the refusals, no error left, every failure a refusal", s)
	}
	if n := strings.Count(in.logs.String(), "refused this pod's breaker report"); n != 1 {
		t.Errorf("the refusal was logged %d times, want once:\n%s", n, in.logs)
	}
}

// TestReportWithoutItsResource: on a cluster where the BreakerReport CRD is not (yet)
// installed the report is refused as not found, retried and explained, and written once
// the CRD is there. It does not run in parallel: the CRD is everybody's.
func TestReportWithoutItsResource(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	crds := envtest.CRDInstallOptions{Paths: []string{"../../config/crd/bases/resilience.fusebox.dev_breakerreports.yaml"}, ErrorIfPathMissing: true}
	reinstall := func() {
		if _, err := envtest.InstallCRDs(cfg, crds); err != nil {
			t.Fatalf("reinstalling the BreakerReport CRD: %v", err)
		}
	}
	must(t, envtest.UninstallCRDs(cfg, crds))
	t.Cleanup(func() {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := k8sClient.Get(context.Background(), client.ObjectKey{Name: "breakerreports.resilience.fusebox.dev"}, &crd); apierrors.IsNotFound(err) {
			reinstall()
		}
	})
	eventually(t, 2*propagation, func() error {
		var crd apiextensionsv1.CustomResourceDefinition
		err := k8sClient.Get(ctx, client.ObjectKey{Name: "breakerreports.resilience.fusebox.dev"}, &crd)
		if err == nil {
			return errors.New("the BreakerReport CRD is still there")
		}
		if !apierrors.IsNotFound(err) {
			return err
		}
		return nil
	})

	ns := newNamespace(t)
	writeConfigMap(t, ns, map[string]string{"early.json": render(t, "early", 1, testPolicy(), "Pod", nil)})
	in := startInstance(t, ns, "a", instanceOptions{breakers: []string{"early"}, passUID: true})
	eventually(t, propagation, func() error {
		s := in.agent.Stats()
		if s.Rejected < 1 || !strings.Contains(s.LastWriteError, "not find the requested resource") {
			return fmt.Errorf("stats %+v: want the missing resource counted as a refusal and named", s)
		}
		return nil
	})
	in.reg.Get("early").Trip()

	reinstall()
	eventually(t, 2*propagation, func() error {
		return memberIs(ns, "early", "a", wantReason(resiliencev1alpha1.StateOpen, breakerconfig.ReasonManual))
	})
	idle(t, in.agent)
	if s := in.agent.Stats(); s.LastWriteError != "" || s.Writes != 1 || s.WriteFailures != s.Rejected {
		t.Errorf("stats %+v: want one write once the CRD is back, no error left, every failure a refusal", s)
	}
}

// TestRecreatedBreakerIsReportedAfresh: a CircuitBreaker deleted and created again under
// the same name publishes a document with a new UID; the pod forgets the verdict it
// adopted from the old one, and reports under the new one's generation.
func TestRecreatedBreakerIsReportedAfresh(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	p := testPolicy()
	p.OpenTimeout = time.Hour
	clock := newFakeClock()
	opened := clock.Now().Add(-5 * time.Second)
	verdict := &breakerconfig.Verdict{State: "Open", Since: opened}
	doc := func(uid string, gen int64) map[string]string {
		c := kube.ConfigOf("cart", gen, p, breakerconfig.ScopeFleet)
		c.UID, c.Verdict = uid, verdict
		b, err := breakerconfig.Marshal(c)
		must(t, err)
		return map[string]string{"cart.json": string(b)}
	}
	writeConfigMap(t, ns, doc("uid-1", 5))
	in := startInstance(t, ns, "a", instanceOptions{clock: clock, breakers: []string{"cart"}, passUID: true})
	eventually(t, propagation, func() error {
		return memberIs(ns, "cart", "a", func(e resiliencev1alpha1.BreakerReportEntry) error {
			if e.State != resiliencev1alpha1.StateOpen || e.Reason != breakerconfig.ReasonAdopted || e.ConfigGeneration != 5 {
				return errors.New("want Open (Adopted) at generation 5")
			}
			return nil
		})
	})
	if n := in.agent.Stats().Adoptions; n != 1 {
		t.Fatalf("%d adoptions, want 1", n)
	}

	// The same breaker republished (another CircuitBreaker of the namespace changed):
	// nothing to adopt again.
	data := doc("uid-1", 5)
	data["other.json"] = render(t, "other", 1, p, "Pod", nil)
	writeConfigMap(t, ns, data)
	eventually(t, propagation, func() error {
		if n := in.agent.Stats().ConfigApplies; n < 2 {
			return fmt.Errorf("%d config applies", n)
		}
		return nil
	})
	if n := in.agent.Stats().Adoptions; n != 1 {
		t.Errorf("%d adoptions after an unrelated change, want still 1", n)
	}

	// Re-created: a new UID, generation 1. A verdict from the new CircuitBreaker is
	// adopted even if it reads like the old one.
	writeConfigMap(t, ns, doc("uid-2", 1))
	eventually(t, propagation, func() error {
		return memberIs(ns, "cart", "a", wantEntry(resiliencev1alpha1.StateOpen, 1))
	})
	if n := in.agent.Stats().Adoptions; n != 2 {
		t.Errorf("%d adoptions after the CircuitBreaker was re-created, want 2: the old verdict was not forgotten", n)
	}
	if !strings.Contains(in.logs.String(), "created anew") {
		t.Errorf("no log line about the re-created CircuitBreaker:\n%s", in.logs)
	}
}

func ptr[T any](v T) *T { return &v }
