package controller

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// newPod creates a pod object for a reporting member; envtest runs no kubelet,
// so it only exists, which is all the controller checks.
func newPod(ctx context.Context, ns, name string) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	Expect(k8sClient.Create(ctx, pod)).To(Succeed())
	return pod
}

// report writes a pod's member entry the way pkg/breaker/kube does: server-side
// apply on the status subresource, one field manager per pod.
func report(ctx context.Context, ns, breaker string, entry map[string]any) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "resilience.fusebox.dev/v1alpha1",
		"kind":       "CircuitBreaker",
		"metadata":   map[string]any{"name": breaker, "namespace": ns},
		"status":     map[string]any{"members": []any{entry}},
	}}
	Expect(k8sClient.Status().Patch(ctx, u, client.Apply, client.FieldOwner("fusebox-pod-"+entry["pod"].(string)), client.ForceOwnership)).To(Succeed())
}

func entry(pod, state string, since time.Time, generation int64) map[string]any {
	return map[string]any{"pod": pod, "state": state, "since": since.UTC().Format(time.RFC3339Nano), "configGeneration": generation}
}

func getBreaker(g Gomega, ctx context.Context, ns, name string) *resiliencev1alpha1.CircuitBreaker {
	var cb resiliencev1alpha1.CircuitBreaker
	g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &cb)).To(Succeed())
	return &cb
}

func condition(cb *resiliencev1alpha1.CircuitBreaker, t string) metav1.Condition {
	if c := meta.FindStatusCondition(cb.Status.Conditions, t); c != nil {
		return *c
	}
	return metav1.Condition{}
}

func eventNotes(ctx context.Context, ns, name, reason string) []string {
	var notes []string
	for _, e := range eventsFor(ctx, ns, name, reason) {
		notes = append(notes, e.Note)
	}
	return notes
}

var _ = Describe("CircuitBreaker status from pod reports", func() {
	var ns string
	BeforeEach(func(ctx SpecContext) { ns = newNamespace(ctx) })

	It("goes Open when a pod opens and Closed when it closes, with Events", func(ctx SpecContext) {
		Expect(k8sClient.Create(ctx, newBreaker(ns, "payments"))).To(Succeed())
		newPod(ctx, ns, "web-a")
		newPod(ctx, ns, "web-b")
		now := time.Now()
		report(ctx, ns, "payments", entry("web-a", "Closed", now, 1))
		report(ctx, ns, "payments", entry("web-b", "Closed", now, 1))
		Eventually(func(g Gomega) {
			cb := getBreaker(g, ctx, ns, "payments")
			g.Expect(cb.Status.State).To(Equal(resiliencev1alpha1.StateClosed))
			g.Expect(condition(cb, "Open").Status).To(Equal(metav1.ConditionFalse))
			g.Expect(condition(cb, "ConfigApplied").Status).To(Equal(metav1.ConditionTrue))
		}).Should(Succeed())

		opened := entry("web-b", "Open", now.Add(time.Second), 1)
		opened["failureRatePercent"], opened["calls"] = 60, 25
		report(ctx, ns, "payments", opened)
		Eventually(func(g Gomega) {
			cb := getBreaker(g, ctx, ns, "payments")
			g.Expect(cb.Status.State).To(Equal(resiliencev1alpha1.StateOpen))
			g.Expect(condition(cb, "Open").Status).To(Equal(metav1.ConditionTrue))
			g.Expect(*cb.Status.MemberCounts).To(Equal(resiliencev1alpha1.MemberCounts{Reporting: 2, Closed: 1, Open: 1, OnLatestConfig: 2}))
		}).Should(Succeed())
		Eventually(func() []string { return eventNotes(ctx, ns, "payments", "CircuitOpened") }).Should(
			ContainElement(SatisfyAll(ContainSubstring("web-b"), ContainSubstring("60% of 25 calls"))))

		report(ctx, ns, "payments", entry("web-b", "HalfOpen", now.Add(31*time.Second), 1))
		Eventually(func() []string { return eventNotes(ctx, ns, "payments", "CircuitHalfOpened") }).ShouldNot(BeEmpty())
		report(ctx, ns, "payments", entry("web-b", "Closed", now.Add(32*time.Second), 1))
		Eventually(func(g Gomega) {
			cb := getBreaker(g, ctx, ns, "payments")
			g.Expect(cb.Status.State).To(Equal(resiliencev1alpha1.StateClosed))
			g.Expect(condition(cb, "Open").Status).To(Equal(metav1.ConditionFalse))
		}).Should(Succeed())
		Eventually(func() []string { return eventNotes(ctx, ns, "payments", "CircuitClosed") }).ShouldNot(BeEmpty())
	})

	It("follows generations in ConfigApplied and reports refusals once", func(ctx SpecContext) {
		cb := newBreaker(ns, "search")
		Expect(k8sClient.Create(ctx, cb)).To(Succeed())
		newPod(ctx, ns, "api-0")
		newPod(ctx, ns, "api-1")
		report(ctx, ns, "search", entry("api-0", "Closed", time.Now(), 1))
		report(ctx, ns, "search", entry("api-1", "Closed", time.Now(), 1))
		Eventually(func(g Gomega) {
			g.Expect(condition(getBreaker(g, ctx, ns, "search"), "ConfigApplied").Status).To(Equal(metav1.ConditionTrue))
		}).Should(Succeed())

		patch := client.MergeFrom(cb.DeepCopy())
		cb.Spec.Mode = resiliencev1alpha1.ModeMetricsOnly
		Expect(k8sClient.Patch(ctx, cb, patch)).To(Succeed())
		Eventually(func(g Gomega) {
			c := condition(getBreaker(g, ctx, ns, "search"), "ConfigApplied")
			g.Expect(c.Reason).To(Equal(resiliencev1alpha1.ReasonMembersBehind))
			g.Expect(c.ObservedGeneration).To(BeEquivalentTo(2))
		}).Should(Succeed())

		report(ctx, ns, "search", entry("api-0", "Closed", time.Now(), 2))
		refused := entry("api-1", "Closed", time.Now(), 1)
		refused["configError"] = "window: must be positive"
		report(ctx, ns, "search", refused)
		Eventually(func(g Gomega) {
			c := condition(getBreaker(g, ctx, ns, "search"), "ConfigApplied")
			g.Expect(c.Reason).To(Equal(resiliencev1alpha1.ReasonMembersRejected))
			g.Expect(c.Message).To(ContainSubstring("api-1: window: must be positive"))
		}).Should(Succeed())
		Eventually(func() []string { return eventNotes(ctx, ns, "search", "ConfigRejected") }).Should(
			ConsistOf(ContainSubstring("api-1: window: must be positive")))
		Consistently(func() []string { return eventNotes(ctx, ns, "search", "ConfigRejected") }, "1s").Should(HaveLen(1))

		report(ctx, ns, "search", entry("api-1", "Closed", time.Now(), 2))
		Eventually(func(g Gomega) {
			g.Expect(condition(getBreaker(g, ctx, ns, "search"), "ConfigApplied").Status).To(Equal(metav1.ConditionTrue))
		}).Should(Succeed())
	})

	It("prunes the reports of pods that no longer exist", func(ctx SpecContext) {
		Expect(k8sClient.Create(ctx, newBreaker(ns, "inventory"))).To(Succeed())
		live := newPod(ctx, ns, "live")
		liveSince := time.Date(2026, 11, 29, 12, 0, 0, 123_000_000, time.UTC)
		report(ctx, ns, "inventory", entry("live", "Closed", liveSince, 1))
		report(ctx, ns, "inventory", entry("ghost", "Open", time.Now(), 1))
		Eventually(func(g Gomega) {
			cb := getBreaker(g, ctx, ns, "inventory")
			g.Expect(cb.Status.Members).To(HaveLen(1))
			g.Expect(cb.Status.Members[0].Pod).To(Equal("live"))
			g.Expect(cb.Status.State).To(Equal(resiliencev1alpha1.StateClosed))
		}).Should(Succeed())
		By("leaving the kept report as its pod wrote it, to the millisecond")
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(resiliencev1alpha1.GroupVersion.WithKind("CircuitBreaker"))
		Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "inventory"}, u)).To(Succeed())
		members, _, _ := unstructured.NestedSlice(u.Object, "status", "members")
		Expect(members).To(ConsistOf(HaveKeyWithValue("since", "2026-11-29T12:00:00.123Z")))
		Eventually(func() []string { return eventNotes(ctx, ns, "inventory", "MemberPruned") }).Should(
			ContainElement(ContainSubstring("ghost")))

		Expect(k8sClient.Delete(ctx, live, client.GracePeriodSeconds(0))).To(Succeed())
		Eventually(func(g Gomega) {
			cb := getBreaker(g, ctx, ns, "inventory")
			g.Expect(cb.Status.Members).To(BeEmpty())
			g.Expect(cb.Status.State).To(BeEmpty())
			g.Expect(condition(cb, "Open").Reason).To(Equal(resiliencev1alpha1.ReasonNoMembers))
		}).Should(Succeed())
	})

	It("publishes the fleet verdict with scope Fleet", func(ctx SpecContext) {
		Expect(k8sClient.Create(ctx, newBreaker(ns, "fleet", func(s *resiliencev1alpha1.CircuitBreakerSpec) {
			s.Scope = resiliencev1alpha1.ScopeFleet
		}))).To(Succeed())
		for _, p := range []string{"p0", "p1", "p2"} {
			newPod(ctx, ns, p)
			report(ctx, ns, "fleet", entry(p, "Closed", time.Now(), 1))
		}
		verdict := func(g Gomega) map[string]any {
			doc := published(g, ctx, ns, "fleet")
			v, _ := doc["verdict"].(map[string]any)
			return v
		}
		Consistently(verdict, "500ms").Should(BeNil())

		openedAt := time.Now().Add(time.Second).Truncate(time.Millisecond)
		report(ctx, ns, "fleet", entry("p1", "Open", openedAt, 1))
		Eventually(verdict).Should(Equal(map[string]any{"state": "Open", "since": openedAt.UTC().Format(time.RFC3339Nano)}))
		Eventually(func(g Gomega) {
			cb := getBreaker(g, ctx, ns, "fleet")
			g.Expect(cb.Status.State).To(Equal(resiliencev1alpha1.StateOpen))
			g.Expect(condition(cb, "Open").Status).To(Equal(metav1.ConditionTrue))
		}).Should(Succeed())

		By("the others adopting it, then one closing after its probes succeed")
		report(ctx, ns, "fleet", entry("p0", "Open", openedAt, 1))
		report(ctx, ns, "fleet", entry("p2", "HalfOpen", openedAt.Add(30*time.Second), 1))
		closedAt := openedAt.Add(31 * time.Second)
		report(ctx, ns, "fleet", entry("p2", "Closed", closedAt, 1))
		Eventually(verdict).Should(HaveKeyWithValue("state", "Closed"))
		Eventually(func(g Gomega) {
			g.Expect(getBreaker(g, ctx, ns, "fleet").Status.State).To(Equal(resiliencev1alpha1.StateClosed))
		}).Should(Succeed())

		By("every pod closed: nothing left to share")
		report(ctx, ns, "fleet", entry("p0", "Closed", closedAt, 1))
		report(ctx, ns, "fleet", entry("p1", "Closed", closedAt, 1))
		Eventually(verdict).Should(BeNil())
	})
})
