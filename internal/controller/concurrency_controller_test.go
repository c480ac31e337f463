package controller

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// withInFlight is a report entry carrying a window's concurrency figures (baseline 0: none).
func withInFlight(e breakerconfig.ReportEntry, peak, limited int64, baseline time.Duration) breakerconfig.ReportEntry {
	e.InFlightPeak, e.Limited = &peak, &limited
	if baseline > 0 {
		e.Baseline = ptr.To(breakerconfig.Duration(baseline))
	}
	return e
}

// publishedConcurrency is the concurrency object published for a breaker, nil for none.
func publishedConcurrency(doc map[string]any) map[string]any {
	c, _ := doc["concurrency"].(map[string]any)
	return c
}

var _ = Describe("One bulkhead for the fleet (issue 44)", func() {
	var ns string
	BeforeEach(func(ctx SpecContext) { ns = newNamespace(ctx) })

	// division is the share, the pods and the generation published for breaker.
	division := func(g Gomega, ctx SpecContext, breaker string) (share, pods, generation float64) {
		c := publishedConcurrency(published(g, ctx, ns, breaker))
		g.Expect(c).NotTo(BeNil())
		return c["share"].(float64), c["pods"].(float64), c["generation"].(float64)
	}

	It("publishes each pod's share, and divides it again as pods come and go", func(ctx SpecContext) {
		Expect(k8sClient.Create(ctx, newBreaker(ns, "payments", func(s *resiliencev1alpha1.CircuitBreakerSpec) {
			s.Concurrency = &resiliencev1alpha1.Concurrency{MaxInFlight: 100, MaxWait: &metav1.Duration{Duration: 250 * time.Millisecond}}
		}))).To(Succeed())
		Expect(k8sClient.Create(ctx, newBreaker(ns, "plain"))).To(Succeed())
		var generation float64
		By("no pod yet: the first pod of the fleet is the fleet")
		Eventually(func(g Gomega) {
			c := publishedConcurrency(published(g, ctx, ns, "payments"))
			g.Expect(c).To(Equal(map[string]any{"share": 100.0, "pods": 0.0, "generation": 1.0, "maxWait": "250ms"}))
			g.Expect(published(g, ctx, ns, "plain")).NotTo(HaveKey("concurrency"))
			g.Expect(getBreaker(g, ctx, ns, "payments").Status.Concurrency).To(Equal(&resiliencev1alpha1.FleetConcurrency{MaxInFlight: 100, Share: 100}))
			g.Expect(getBreaker(g, ctx, ns, "plain").Status.Concurrency).To(BeNil())
		}).Should(Succeed())

		now := time.Now()
		By("scale-up: four pods report the breaker")
		for _, pod := range []string{"pod-a", "pod-b", "pod-c", "pod-d"} {
			reports(ctx, ns, pod, entry("payments", "Closed", "Started", now, 1))
		}
		Eventually(func(g Gomega) {
			share, pods, gen := division(g, ctx, "payments")
			g.Expect([]float64{share, pods}).To(Equal([]float64{25, 4}))
			g.Expect(gen).To(BeNumerically(">", 1))
			g.Expect(getBreaker(g, ctx, ns, "payments").Status.Concurrency).To(Equal(&resiliencev1alpha1.FleetConcurrency{MaxInFlight: 100, Pods: 4, Share: 25}))
			generation = gen // once every expectation held: a failed attempt must not move it
		}).Should(Succeed())

		By("a fifth pod: a smaller share, a new generation")
		reports(ctx, ns, "pod-e", entry("payments", "Closed", "Started", now, 1))
		Eventually(func(g Gomega) {
			share, pods, gen := division(g, ctx, "payments")
			g.Expect([]float64{share, pods}).To(Equal([]float64{20, 5}))
			g.Expect(gen).To(BeNumerically(">", generation))
			generation = gen
		}).Should(Succeed())

		By("scale-down: two pods go, one finishes")
		deletePod(ctx, ns, "pod-d")
		deletePod(ctx, ns, "pod-e")
		setPhase(ctx, ns, "pod-c", corev1.PodSucceeded)
		Eventually(func(g Gomega) {
			share, pods, gen := division(g, ctx, "payments")
			g.Expect([]float64{share, pods}).To(Equal([]float64{50, 2}))
			g.Expect(gen).To(BeNumerically(">", generation))
			g.Expect(getBreaker(g, ctx, ns, "payments").Status.Concurrency).To(Equal(&resiliencev1alpha1.FleetConcurrency{MaxInFlight: 100, Pods: 2, Share: 50}))
			generation = gen
		}).Should(Succeed())

		By("a report that changes nothing of the division keeps its generation")
		reports(ctx, ns, "pod-a", withInFlight(entry("payments", "Closed", "Started", now, 1), 7, 0, 0))
		Eventually(func(g Gomega) {
			g.Expect(getBreaker(g, ctx, ns, "payments").Status.Concurrency.InFlight).To(BeEquivalentTo(7))
		}).Should(Succeed())
		Consistently(func(g Gomega) {
			_, _, gen := division(g, ctx, "payments")
			g.Expect(gen).To(Equal(generation))
		}, "2s").Should(Succeed())

		By("a new maxInFlight: a new share and generation at once")
		Eventually(func(g Gomega) {
			cb := getBreaker(g, ctx, ns, "payments")
			cb.Spec.Concurrency.MaxInFlight = 10
			g.Expect(k8sClient.Update(ctx, cb)).To(Succeed())
		}).Should(Succeed())
		Eventually(func(g Gomega) {
			share, pods, gen := division(g, ctx, "payments")
			g.Expect([]float64{share, pods}).To(Equal([]float64{5, 2}))
			g.Expect(gen).To(BeNumerically(">", generation))
		}).Should(Succeed())
	})

	It("adds up the pods' reports into status.concurrency, whatever carries them", func(ctx SpecContext) {
		Expect(k8sClient.Create(ctx, newBreaker(ns, "search", func(s *resiliencev1alpha1.CircuitBreakerSpec) {
			s.Concurrency = &resiliencev1alpha1.Concurrency{MaxInFlight: 40}
		}))).To(Succeed())
		now := time.Now()
		By("two pods on their own, one of them past its share")
		reports(ctx, ns, "solo-a", withInFlight(entry("search", "Closed", "Started", now, 1), 6, 3, 0))
		reports(ctx, ns, "solo-b", withInFlight(entry("search", "Closed", "Started", now, 1), 1_000_000, 5, 0))
		By("two pods through their node's agent")
		agent := asAgent(ctx, "node-a")
		setAgentReady(ctx, "node-a", corev1.ConditionTrue, time.Now())
		boundPod(ctx, ns, "web-1", "node-a")
		boundPod(ctx, ns, "web-2", "node-a")
		node := nodeEntry("search", 2, 0, now)
		node.InFlightPeak, node.Limited = 15, 4
		Eventually(func() error { return writeNodeReport(ctx, agent, nodeReport(ctx, ns, "node-a", node)) }).Should(Succeed())
		// Four pods share 40: 10 each. solo-b counts its share, no more; the node's two pods
		// count their 15 in full (their shares are 20).
		Eventually(func(g Gomega) {
			g.Expect(getBreaker(g, ctx, ns, "search").Status.Concurrency).To(Equal(&resiliencev1alpha1.FleetConcurrency{
				MaxInFlight: 40, Pods: 4, Share: 10, InFlight: 6 + 10 + 15, Limited: 3 + 5 + 4}))
			share, pods, _ := division(g, ctx, "search")
			g.Expect([]float64{share, pods}).To(Equal([]float64{10, 4}))
		}).Should(Succeed())
		Eventually(func(g Gomega) {
			cb := getBreaker(g, ctx, ns, "search")
			g.Expect(cb.Status.MemberCounts).NotTo(BeNil())
			g.Expect(cb.Status.MemberCounts.Reporting).To(BeEquivalentTo(4))
		}).Should(Succeed())
	})

	It("publishes the median pod's baseline, which a pod that reports a wild one cannot move", func(ctx SpecContext) {
		Expect(k8sClient.Create(ctx, newBreaker(ns, "ledger", func(s *resiliencev1alpha1.CircuitBreakerSpec) {
			s.Concurrency = &resiliencev1alpha1.Concurrency{MaxInFlight: 100, Adaptive: &resiliencev1alpha1.AdaptiveConcurrency{}}
		}))).To(Succeed())
		now := time.Now()
		ms := time.Millisecond
		for pod, baseline := range map[string]time.Duration{"pod-a": 10 * ms, "pod-b": 12 * ms, "pod-c": 11 * ms} {
			reports(ctx, ns, pod, withInFlight(entry("ledger", "Closed", "Started", now, 1), 1, 0, baseline))
		}
		baseline := func(g Gomega) string {
			c := publishedConcurrency(published(g, ctx, ns, "ledger"))
			g.Expect(c).To(HaveKeyWithValue("adaptive", map[string]any{"tolerance": 1.5, "minLimit": 1.0}))
			b, _ := c["baseline"].(string)
			return b
		}
		Eventually(func(g Gomega) { g.Expect(baseline(g)).To(Equal("11ms")) }).Should(Succeed())

		By("a pod that claims an hour")
		reports(ctx, ns, "liar", withInFlight(entry("ledger", "Closed", "Started", now, 1), 1, 0, time.Hour))
		Eventually(func(g Gomega) {
			g.Expect(publishedConcurrency(published(g, ctx, ns, "ledger"))).To(HaveKeyWithValue("pods", 4.0))
		}).Should(Succeed())
		Consistently(func(g Gomega) { g.Expect(baseline(g)).To(BeElementOf("11ms", "12ms")) }, "2s").Should(Succeed())

		By("the same pod claiming a nanosecond")
		reports(ctx, ns, "liar", withInFlight(entry("ledger", "Closed", "Started", now, 1), 1, 0, time.Nanosecond))
		Consistently(func(g Gomega) { g.Expect(baseline(g)).To(BeElementOf("10ms", "11ms", "12ms")) }, "2s").Should(Succeed())
	})
})
