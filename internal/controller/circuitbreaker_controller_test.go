package controller

import (
	"context"
	"encoding/json"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// newNamespace creates a namespace of the spec's own; envtest runs no
// namespace controller, so it is never really deleted and needs no cleanup.
func newNamespace(ctx context.Context) string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "cb-"}}
	Expect(k8sClient.Create(ctx, ns)).To(Succeed())
	return ns.Name
}

func newBreaker(ns, name string, mutate ...func(*resiliencev1alpha1.CircuitBreakerSpec)) *resiliencev1alpha1.CircuitBreaker {
	cb := &resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	for _, m := range mutate {
		m(&cb.Spec)
	}
	return cb
}

func configMapKey(ns string) types.NamespacedName {
	return types.NamespacedName{Namespace: ns, Name: breakerconfig.ConfigMapName}
}

// published returns the JSON published for a breaker, decoded.
func published(g Gomega, ctx context.Context, ns, name string) map[string]any {
	var cm corev1.ConfigMap
	g.Expect(k8sClient.Get(ctx, configMapKey(ns), &cm)).To(Succeed())
	raw, ok := cm.Data[name+".json"]
	g.Expect(ok).To(BeTrue(), "ConfigMap has no key %s.json; keys: %v", name, cm.Data)
	var doc map[string]any
	g.Expect(json.Unmarshal([]byte(raw), &doc)).To(Succeed())
	return doc
}

func readyCondition(g Gomega, ctx context.Context, ns, name string) *metav1.Condition {
	var cb resiliencev1alpha1.CircuitBreaker
	g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &cb)).To(Succeed())
	c := meta.FindStatusCondition(cb.Status.Conditions, resiliencev1alpha1.ConditionReady)
	g.Expect(c).NotTo(BeNil(), "no Ready condition yet")
	g.Expect(cb.Status.ObservedGeneration).To(Equal(cb.Generation))
	g.Expect(c.ObservedGeneration).To(Equal(cb.Generation))
	return c
}

func eventsFor(ctx context.Context, ns, name, reason string) []eventsv1.Event {
	var list eventsv1.EventList
	Expect(k8sClient.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}

var _ = Describe("CircuitBreaker controller", func() {
	var ns string
	BeforeEach(func(ctx SpecContext) { ns = newNamespace(ctx) })

	It("publishes a new breaker exactly as rendered and marks it Ready", func(ctx SpecContext) {
		cb := newBreaker(ns, "payments-api")
		Expect(k8sClient.Create(ctx, cb)).To(Succeed())

		Eventually(func(g Gomega) {
			var cm corev1.ConfigMap
			g.Expect(k8sClient.Get(ctx, configMapKey(ns), &cm)).To(Succeed())
			g.Expect(cm.Labels).To(HaveKeyWithValue(breakerconfig.ManagedByLabel, breakerconfig.ManagedByValue))
			g.Expect(cm.Data).To(HaveLen(1))
			g.Expect(cm.Data["payments-api.json"]).To(Equal(`{
  "name": "payments-api",
  "generation": 1,
  "uid": "` + string(cb.UID) + `",
  "openTimeout": "30s",
  "window": "10s",
  "failureRatio": 0.5,
  "minimumThroughput": 20,
  "successThreshold": 2,
  "halfOpenPermittedCalls": 1,
  "mode": "Enforce",
  "scope": "Pod"
}`))
			c := readyCondition(g, ctx, ns, "payments-api")
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(c.Reason).To(Equal(resiliencev1alpha1.ReasonConfigPublished))
		}).Should(Succeed())

		Eventually(func() []eventsv1.Event {
			return eventsFor(ctx, ns, "payments-api", resiliencev1alpha1.ReasonConfigPublished)
		}).ShouldNot(BeEmpty())
	})

	It("renders a new generation when the spec changes", func(ctx SpecContext) {
		cb := newBreaker(ns, "search")
		Expect(k8sClient.Create(ctx, cb)).To(Succeed())
		Eventually(func(g Gomega) { g.Expect(published(g, ctx, ns, "search")["generation"]).To(BeEquivalentTo(1)) }).Should(Succeed())

		patch := client.MergeFrom(cb.DeepCopy())
		cb.Spec.FailureRatePercent = ptr.To[int32](25)
		cb.Spec.OpenTimeout = &metav1.Duration{Duration: 90 * time.Second}
		cb.Spec.Mode = resiliencev1alpha1.ModeMetricsOnly
		cb.Spec.Scope = resiliencev1alpha1.ScopeFleet
		Expect(k8sClient.Patch(ctx, cb, patch)).To(Succeed())

		Eventually(func(g Gomega) {
			doc := published(g, ctx, ns, "search")
			g.Expect(doc).To(HaveKeyWithValue("generation", BeEquivalentTo(2)))
			g.Expect(doc).To(HaveKeyWithValue("failureRatio", 0.25))
			g.Expect(doc).To(HaveKeyWithValue("openTimeout", "1m30s"))
			g.Expect(doc).To(HaveKeyWithValue("mode", "MetricsOnly"))
			g.Expect(doc).To(HaveKeyWithValue("scope", "Fleet"))
			g.Expect(readyCondition(g, ctx, ns, "search").Status).To(Equal(metav1.ConditionTrue))
		}).Should(Succeed())
	})

	It("keeps namespaces apart, drops a deleted breaker's key, then the ConfigMap", func(ctx SpecContext) {
		other := newNamespace(ctx)
		a, b, c := newBreaker(ns, "a"), newBreaker(ns, "b"), newBreaker(other, "c")
		for _, cb := range []*resiliencev1alpha1.CircuitBreaker{a, b, c} {
			Expect(k8sClient.Create(ctx, cb)).To(Succeed())
		}
		Eventually(func(g Gomega) {
			var cm corev1.ConfigMap
			g.Expect(k8sClient.Get(ctx, configMapKey(ns), &cm)).To(Succeed())
			g.Expect(cm.Data).To(HaveLen(2))
			g.Expect(cm.Data).To(HaveKey("a.json"))
			g.Expect(cm.Data).To(HaveKey("b.json"))
			g.Expect(k8sClient.Get(ctx, configMapKey(other), &cm)).To(Succeed())
			g.Expect(cm.Data).To(HaveLen(1))
			g.Expect(cm.Data).To(HaveKey("c.json"))
		}).Should(Succeed())

		Expect(k8sClient.Delete(ctx, a)).To(Succeed())
		Eventually(func(g Gomega) {
			var cm corev1.ConfigMap
			g.Expect(k8sClient.Get(ctx, configMapKey(ns), &cm)).To(Succeed())
			g.Expect(cm.Data).To(HaveLen(1))
			g.Expect(cm.Data).To(HaveKey("b.json"))
		}).Should(Succeed())

		Expect(k8sClient.Delete(ctx, b)).To(Succeed())
		Eventually(func() error {
			return k8sClient.Get(ctx, configMapKey(ns), &corev1.ConfigMap{})
		}).Should(Satisfy(apierrors.IsNotFound))
		Consistently(func(g Gomega) {
			g.Expect(k8sClient.Get(ctx, configMapKey(other), &corev1.ConfigMap{})).To(Succeed())
		}, "500ms").Should(Succeed())
	})

	It("puts back a hand-edited ConfigMap", func(ctx SpecContext) {
		Expect(k8sClient.Create(ctx, newBreaker(ns, "inventory"))).To(Succeed())
		var want string
		Eventually(func(g Gomega) {
			var cm corev1.ConfigMap
			g.Expect(k8sClient.Get(ctx, configMapKey(ns), &cm)).To(Succeed())
			want = cm.Data["inventory.json"]
			g.Expect(want).NotTo(BeEmpty())
		}).Should(Succeed())

		var cm corev1.ConfigMap
		Expect(k8sClient.Get(ctx, configMapKey(ns), &cm)).To(Succeed())
		cm.Data["inventory.json"] = `{"name":"inventory","failureRatio":7}`
		cm.Data["stray.json"] = "not a breaker"
		Expect(k8sClient.Update(ctx, &cm)).To(Succeed())

		Eventually(func(g Gomega) {
			var cm corev1.ConfigMap
			g.Expect(k8sClient.Get(ctx, configMapKey(ns), &cm)).To(Succeed())
			g.Expect(cm.Data).To(Equal(map[string]string{"inventory.json": want}))
		}).Should(Succeed())

		By("taking the ConfigMap back when its label was edited away")
		Expect(k8sClient.Get(ctx, configMapKey(ns), &cm)).To(Succeed())
		delete(cm.Labels, breakerconfig.ManagedByLabel)
		cm.Data["inventory.json"] = "{}"
		Expect(k8sClient.Update(ctx, &cm)).To(Succeed())
		// The label edit looks like a deletion to the label-filtered cache,
		// which triggers the namespace; the reconciler finds the object around
		// the cache and labels it again.
		Eventually(func(g Gomega) {
			var cm corev1.ConfigMap
			g.Expect(k8sClient.Get(ctx, configMapKey(ns), &cm)).To(Succeed())
			g.Expect(cm.Labels).To(HaveKeyWithValue(breakerconfig.ManagedByLabel, breakerconfig.ManagedByValue))
			g.Expect(cm.Data).To(Equal(map[string]string{"inventory.json": want}))
		}).Should(Succeed())
	})

	It("writes nothing when a reconcile finds nothing to change", func(ctx SpecContext) {
		Expect(k8sClient.Create(ctx, newBreaker(ns, "one"))).To(Succeed())
		Expect(k8sClient.Create(ctx, newBreaker(ns, "two"))).To(Succeed())
		Eventually(func(g Gomega) {
			for _, name := range []string{"one", "two"} {
				g.Expect(readyCondition(g, ctx, ns, name).Status).To(Equal(metav1.ConditionTrue))
			}
		}).Should(Succeed())

		versions := func() map[string]string {
			out := map[string]string{}
			var cm corev1.ConfigMap
			Expect(k8sClient.Get(ctx, configMapKey(ns), &cm)).To(Succeed())
			out["configmap"] = cm.ResourceVersion
			var list resiliencev1alpha1.CircuitBreakerList
			Expect(k8sClient.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
			for _, cb := range list.Items {
				out[cb.Name] = cb.ResourceVersion
			}
			var events eventsv1.EventList
			Expect(k8sClient.List(ctx, &events, client.InNamespace(ns))).To(Succeed())
			for _, e := range events.Items {
				out["event/"+e.Name] = e.ResourceVersion
			}
			return out
		}
		before := versions()
		for range 2 {
			_, err := reconciler.Reconcile(ctx, reconcile.Request{NamespacedName: configMapKey(ns)})
			Expect(err).NotTo(HaveOccurred())
		}
		Consistently(versions, "1s").Should(Equal(before))
	})
})
