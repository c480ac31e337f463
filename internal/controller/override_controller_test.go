package controller

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

func overriddenCondition(g Gomega, ctx context.Context, ns, name string) *metav1.Condition {
	var cb resiliencev1alpha1.CircuitBreaker
	g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &cb)).To(Succeed())
	c := meta.FindStatusCondition(cb.Status.Conditions, resiliencev1alpha1.ConditionOverridden)
	g.Expect(c).NotTo(BeNil(), "no Overridden condition yet")
	return c
}

// occurrences counts the times an Event was recorded: the recorder folds repeats of one
// Event into a series on the same object.
func occurrences(events []eventsv1.Event) int32 {
	var n int32
	for _, e := range events {
		if e.Series != nil {
			n += e.Series.Count
		} else {
			n++
		}
	}
	return n
}

var _ = Describe("Overrides", func() {
	var ns string
	BeforeEach(func(ctx SpecContext) { ns = newNamespace(ctx) })

	It("publishes the override's mode until it ends, then spec.mode, with nobody touching the object", func(ctx SpecContext) {
		// The API server keeps whole seconds; a few of them let the controller see the
		// override in force on a loaded machine.
		until := time.Now().Add(6 * time.Second).Truncate(time.Second)
		cb := newBreaker(ns, "payments", func(s *resiliencev1alpha1.CircuitBreakerSpec) {
			s.Mode = resiliencev1alpha1.ModeEnforce
			s.Override = &resiliencev1alpha1.Override{Mode: resiliencev1alpha1.ModeForcedOpen, Until: metav1.NewTime(until), Reason: "INC-42: provider outage"}
		})
		cb.Annotations = map[string]string{resiliencev1alpha1.AnnotationOverriddenBy: "alice@example.com"}
		Expect(k8sClient.Create(ctx, cb)).To(Succeed())

		Eventually(func(g Gomega) {
			g.Expect(published(g, ctx, ns, "payments")).To(HaveKeyWithValue("mode", "ForcedOpen"))
			c := overriddenCondition(g, ctx, ns, "payments")
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(c.Reason).To(Equal(resiliencev1alpha1.ReasonOverrideActive))
			g.Expect(c.Message).To(Equal("Held ForcedOpen until " + until.UTC().Format(time.RFC3339) + " by alice@example.com: INC-42: provider outage"))
		}).Should(Succeed())
		Expect(time.Now()).To(BeTemporally("<", until), "the machine was too slow to see the override in force")

		By("requeueing for the expiry, not polling")
		res, err := reconciler.ReconcileConfig(ctx, reconcile.Request{NamespacedName: configMapKey(ns)})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.RequeueAfter).To(BeNumerically(">", 0))
		Expect(res.RequeueAfter).To(BeNumerically("<=", time.Until(until)+time.Second))

		By("going back to spec.mode at until")
		var stored resiliencev1alpha1.CircuitBreaker
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(cb), &stored)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(published(g, ctx, ns, "payments")).To(HaveKeyWithValue("mode", "Enforce"))
			c := overriddenCondition(g, ctx, ns, "payments")
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(resiliencev1alpha1.ReasonOverrideExpired))
		}).Should(Succeed())
		Expect(time.Now()).To(BeTemporally(">=", until))
		var after resiliencev1alpha1.CircuitBreaker
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(cb), &after)).To(Succeed())
		Expect(after.Generation).To(Equal(stored.Generation), "the spec was not touched")
		res, err = reconciler.ReconcileConfig(ctx, reconcile.Request{NamespacedName: configMapKey(ns)})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.RequeueAfter).To(BeZero(), "nothing left to wait for")

		By("recording each Event once, also for an operator that starts afresh")
		restarted := &CircuitBreakerReconciler{Client: reconciler.Client, APIReader: reconciler.APIReader, Recorder: reconciler.Recorder, agentPods: reconciler.agentPods}
		for range 2 {
			_, err := restarted.Reconcile(ctx, reconcile.Request{NamespacedName: configMapKey(ns)})
			Expect(err).NotTo(HaveOccurred())
		}
		Eventually(func() int32 {
			return occurrences(eventsFor(ctx, ns, "payments", resiliencev1alpha1.EventOverrideExpired))
		}).Should(Equal(int32(1)))
		Consistently(func(g Gomega) {
			g.Expect(occurrences(eventsFor(ctx, ns, "payments", resiliencev1alpha1.EventOverrideStarted))).To(Equal(int32(1)))
			g.Expect(occurrences(eventsFor(ctx, ns, "payments", resiliencev1alpha1.EventOverrideExpired))).To(Equal(int32(1)))
			g.Expect(eventsFor(ctx, ns, "payments", resiliencev1alpha1.EventOverrideCancelled)).To(BeEmpty())
		}, "2s").Should(Succeed())
		Expect(eventsFor(ctx, ns, "payments", resiliencev1alpha1.EventOverrideExpired)[0].Note).To(
			Equal("The ForcedOpen override ran out at " + until.UTC().Format(time.RFC3339) + "; spec.mode (Enforce) applies again"))
	})

	It("records OverrideCancelled when the override is removed before its time", func(ctx SpecContext) {
		cb := newBreaker(ns, "search", func(s *resiliencev1alpha1.CircuitBreakerSpec) {
			s.Mode = resiliencev1alpha1.ModeMetricsOnly
			s.Override = &resiliencev1alpha1.Override{Mode: resiliencev1alpha1.ModeForcedClosed,
				Until: metav1.NewTime(time.Now().Add(time.Hour)), Reason: "load test"}
		})
		Expect(k8sClient.Create(ctx, cb)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(published(g, ctx, ns, "search")).To(HaveKeyWithValue("mode", "ForcedClosed"))
			g.Expect(overriddenCondition(g, ctx, ns, "search").Status).To(Equal(metav1.ConditionTrue))
		}).Should(Succeed())

		patch := client.MergeFrom(cb.DeepCopy())
		cb.Spec.Override = nil
		Expect(k8sClient.Patch(ctx, cb, patch)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(published(g, ctx, ns, "search")).To(HaveKeyWithValue("mode", "MetricsOnly"))
			c := overriddenCondition(g, ctx, ns, "search")
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(resiliencev1alpha1.ReasonNoOverride))
		}).Should(Succeed())
		Eventually(func() int32 {
			return occurrences(eventsFor(ctx, ns, "search", resiliencev1alpha1.EventOverrideCancelled))
		}).Should(Equal(int32(1)))
		Consistently(func(g Gomega) {
			g.Expect(occurrences(eventsFor(ctx, ns, "search", resiliencev1alpha1.EventOverrideCancelled))).To(Equal(int32(1)))
			g.Expect(eventsFor(ctx, ns, "search", resiliencev1alpha1.EventOverrideExpired)).To(BeEmpty())
		}, "1s").Should(Succeed())
	})
})
