package controller

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

var _ = Describe("CircuitBreaker status from BreakerReports", func() {
	var ns string
	BeforeEach(func(ctx SpecContext) { ns = newNamespace(ctx) })

	It("goes Open when a pod opens and Closed when it closes, with Events", func(ctx SpecContext) {
		Expect(k8sClient.Create(ctx, newBreaker(ns, "payments"))).To(Succeed())
		now := time.Now()
		reports(ctx, ns, "web-a", entry("payments", "Closed", "Started", now, 1))
		reports(ctx, ns, "web-b", entry("payments", "Closed", "Started", now, 1))
		Eventually(func(g Gomega) {
			cb := getBreaker(g, ctx, ns, "payments")
			g.Expect(cb.Status.State).To(Equal(resiliencev1alpha1.StateClosed))
			g.Expect(condition(cb, "Open").Status).To(Equal(metav1.ConditionFalse))
			g.Expect(condition(cb, "ConfigApplied").Status).To(Equal(metav1.ConditionTrue))
			g.Expect(listedPods(cb)).To(ConsistOf("web-a", "web-b"))
		}).Should(Succeed())

		opened := entry("payments", "Open", "Tripped", time.Now(), 1)
		opened.FailureRatePercent, opened.Calls = ptr.To[int32](60), ptr.To[int64](25)
		reports(ctx, ns, "web-b", opened)
		Eventually(func(g Gomega) {
			cb := getBreaker(g, ctx, ns, "payments")
			g.Expect(cb.Status.State).To(Equal(resiliencev1alpha1.StateOpen))
			g.Expect(condition(cb, "Open").Status).To(Equal(metav1.ConditionTrue))
			g.Expect(*cb.Status.MemberCounts).To(Equal(resiliencev1alpha1.MemberCounts{Reporting: 2, Closed: 1, Open: 1, OnLatestConfig: 2}))
			g.Expect(listedPods(cb)).To(Equal([]string{"web-b", "web-a"}), "the open pod first")
			g.Expect(cb.Status.Members[0].Reason).To(Equal("Tripped"))
		}).Should(Succeed())
		Eventually(func() []string { return eventNotes(ctx, ns, "payments", "CircuitOpened") }).Should(
			ContainElement(SatisfyAll(ContainSubstring("web-b"), ContainSubstring("60% of 25 calls"))))

		reports(ctx, ns, "web-b", entry("payments", "HalfOpen", "TimedOut", time.Now(), 1))
		Eventually(func() []string { return eventNotes(ctx, ns, "payments", "CircuitHalfOpened") }).ShouldNot(BeEmpty())
		reports(ctx, ns, "web-b", entry("payments", "Closed", "ProbesSucceeded", time.Now(), 1))
		Eventually(func(g Gomega) {
			cb := getBreaker(g, ctx, ns, "payments")
			g.Expect(cb.Status.State).To(Equal(resiliencev1alpha1.StateClosed))
			g.Expect(condition(cb, "Open").Status).To(Equal(metav1.ConditionFalse))
		}).Should(Succeed())
		Eventually(func() []string { return eventNotes(ctx, ns, "payments", "CircuitClosed") }).ShouldNot(BeEmpty())
	})

	It("shows a breaker Group as one line per pod and their sum", func(ctx SpecContext) {
		Expect(k8sClient.Create(ctx, newBreaker(ns, "hosts"))).To(Succeed())
		group := func(keys, open, halfOpen int32, worst ...string) breakerconfig.ReportEntry {
			e := entry("hosts", "Closed", "Started", time.Now(), 1)
			e.Keys = &breakerconfig.KeySummary{Keys: keys, Open: open, HalfOpen: halfOpen, Worst: worst}
			return e
		}
		reports(ctx, ns, "web-a", group(40, 2, 1, "api.example.com", "cdn.example.com", "img.example.com"))
		reports(ctx, ns, "web-b", group(25, 1, 0, "cdn.example.com"))
		Eventually(func(g Gomega) {
			cb := getBreaker(g, ctx, ns, "hosts")
			g.Expect(cb.Status.Keys).To(Equal(&resiliencev1alpha1.KeySummary{Keys: 40, Open: 3, HalfOpen: 1,
				Worst: []string{"cdn.example.com", "api.example.com", "img.example.com"}}))
			g.Expect(cb.Status.MemberCounts.Reporting).To(BeEquivalentTo(2), "one line per pod, not one per key")
			g.Expect(cb.Status.Members).To(ContainElement(SatisfyAll(
				HaveField("Pod", "web-b"),
				HaveField("Keys", Equal(&resiliencev1alpha1.KeySummary{Keys: 25, Open: 1, Worst: []string{"cdn.example.com"}})))))
		}).Should(Succeed())
	})

	It("follows generations in ConfigApplied and reports refusals once", func(ctx SpecContext) {
		cb := newBreaker(ns, "search")
		Expect(k8sClient.Create(ctx, cb)).To(Succeed())
		reports(ctx, ns, "api-0", entry("search", "Closed", "Started", time.Now(), 1))
		reports(ctx, ns, "api-1", entry("search", "Closed", "Started", time.Now(), 1))
		Eventually(func(g Gomega) {
			g.Expect(condition(getBreaker(g, ctx, ns, "search"), "ConfigApplied").Status).To(Equal(metav1.ConditionTrue))
		}).Should(Succeed())

		patch := client.MergeFrom(cb.DeepCopy())
		cb.Spec.Mode = resiliencev1alpha1.ModeMetricsOnly
		Expect(k8sClient.Patch(ctx, cb, patch)).To(Succeed())
		Eventually(func(g Gomega) {
			c := condition(getBreaker(g, ctx, ns, "search"), "ConfigApplied")
			g.Expect(c.Reason).To(Equal(resiliencev1alpha1.ReasonMembersBehind))
			g.Expect(c.Message).To(Equal("0 of 2 pods run generation 2"))
			g.Expect(c.ObservedGeneration).To(BeEquivalentTo(2))
		}).Should(Succeed())

		reports(ctx, ns, "api-0", entry("search", "Closed", "Started", time.Now(), 2))
		refused := entry("search", "Closed", "Started", time.Now(), 1)
		refused.ConfigError = "window: must be positive"
		reports(ctx, ns, "api-1", refused)
		Eventually(func(g Gomega) {
			c := condition(getBreaker(g, ctx, ns, "search"), "ConfigApplied")
			g.Expect(c.Reason).To(Equal(resiliencev1alpha1.ReasonMembersRejected))
			g.Expect(c.Message).To(ContainSubstring("api-1: window: must be positive"))
		}).Should(Succeed())
		Eventually(func() []string { return eventNotes(ctx, ns, "search", "ConfigRejected") }).Should(
			ConsistOf(ContainSubstring("api-1: window: must be positive")))
		Consistently(func() []string { return eventNotes(ctx, ns, "search", "ConfigRejected") }, "2s").Should(HaveLen(1))

		reports(ctx, ns, "api-1", entry("search", "Closed", "Started", time.Now(), 2))
		Eventually(func(g Gomega) {
			c := condition(getBreaker(g, ctx, ns, "search"), "ConfigApplied")
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(c.Message).To(Equal("All 2 pods run generation 2"))
		}).Should(Succeed())
	})

	It("deletes the reports of deleted pods, with one Normal MemberPruned Event per breaker", func(ctx SpecContext) {
		By("pods that report two breakers and are gone before either breaker exists")
		gone := []string{"job-0", "job-1", "job-2"}
		for _, p := range gone {
			reports(ctx, ns, p, entry("orders", "Open", "Tripped", time.Now(), 1), entry("stock", "Closed", "Started", time.Now(), 1))
		}
		reports(ctx, ns, "web", entry("orders", "Closed", "Started", time.Now(), 1), entry("stock", "Closed", "Started", time.Now(), 1))
		for _, p := range gone {
			deletePod(ctx, ns, p)
		}
		Consistently(func() bool { return reportExists(ctx, ns, "job-0") }, "1s").Should(BeTrue(),
			"nothing to prune for while no breaker exists")

		By("one reconcile pruning all three, once the first breaker appears")
		Expect(k8sClient.Create(ctx, newBreaker(ns, "orders"))).To(Succeed())
		Eventually(func(g Gomega) {
			for _, p := range gone {
				g.Expect(reportExists(ctx, ns, p)).To(BeFalse(), "report %s", p)
			}
			g.Expect(reportExists(ctx, ns, "web")).To(BeTrue())
			cb := getBreaker(g, ctx, ns, "orders")
			g.Expect(cb.Status.State).To(Equal(resiliencev1alpha1.StateClosed))
			g.Expect(listedPods(cb)).To(Equal([]string{"web"}))
		}).Should(Succeed())
		Eventually(func() []eventsv1.Event { return eventsFor(ctx, ns, "orders", "MemberPruned") }).Should(HaveLen(1))
		pruned := eventsFor(ctx, ns, "orders", "MemberPruned")[0]
		Expect(pruned.Type).To(Equal(corev1.EventTypeNormal))
		Expect(pruned.Note).To(Equal("Deleted the reports of 3 pods that no longer exist: job-0; job-1; job-2"))

		By("no Event on a breaker created after the reports went")
		Expect(k8sClient.Create(ctx, newBreaker(ns, "stock"))).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(getBreaker(g, ctx, ns, "stock").Status.MemberCounts).To(HaveField("Reporting", BeEquivalentTo(1)))
		}).Should(Succeed())

		By("a pod deleted while both breakers exist: one Event on each")
		deletePod(ctx, ns, "web")
		Eventually(func() bool { return reportExists(ctx, ns, "web") }).Should(BeFalse())
		for _, name := range []string{"orders", "stock"} {
			Eventually(func(g Gomega) {
				g.Expect(eventNotes(ctx, ns, name, "MemberPruned")).To(ContainElement("Deleted the reports of 1 pods that no longer exist: web"))
				cb := getBreaker(g, ctx, ns, name)
				g.Expect(cb.Status.Members).To(BeEmpty())
				g.Expect(cb.Status.State).To(BeEmpty())
				g.Expect(condition(cb, "Open").Reason).To(Equal(resiliencev1alpha1.ReasonNoMembers))
			}).Should(Succeed())
		}
		Consistently(func(g Gomega) {
			g.Expect(eventsFor(ctx, ns, "orders", "MemberPruned")).To(HaveLen(2))
			g.Expect(eventsFor(ctx, ns, "stock", "MemberPruned")).To(HaveLen(1))
			for _, name := range []string{"orders", "stock"} {
				for _, e := range eventsFor(ctx, ns, name, "MemberPruned") {
					g.Expect(e.Type).To(Equal(corev1.EventTypeNormal))
				}
			}
		}, "2s").Should(Succeed())
	})

	It("prunes the report of a pod re-created under its name, and counts the new pod's", func(ctx SpecContext) {
		reports(ctx, ns, "web-0", entry("carts", "Open", "Tripped", time.Now(), 1))
		old := ensurePod(ctx, ns, "web-0")
		deletePod(ctx, ns, "web-0")
		renewed := ensurePod(ctx, ns, "web-0")
		Expect(renewed.UID).NotTo(Equal(old.UID))

		Expect(k8sClient.Create(ctx, newBreaker(ns, "carts"))).To(Succeed())
		Eventually(func() bool { return reportExists(ctx, ns, "web-0") }).Should(BeFalse(),
			"the report owned by the old pod's UID is pruned")
		Eventually(func() []string { return eventNotes(ctx, ns, "carts", "MemberPruned") }).Should(
			ConsistOf("Deleted the reports of 1 pods that no longer exist: web-0"))
		Eventually(func(g Gomega) {
			g.Expect(getBreaker(g, ctx, ns, "carts").Status.State).To(BeEmpty(), "the old pod's Open counts for nothing")
		}).Should(Succeed())

		reports(ctx, ns, "web-0", entry("carts", "Closed", "Started", time.Now(), 1))
		Eventually(func(g Gomega) {
			cb := getBreaker(g, ctx, ns, "carts")
			g.Expect(cb.Status.State).To(Equal(resiliencev1alpha1.StateClosed))
			g.Expect(listedPods(cb)).To(Equal([]string{"web-0"}))
		}).Should(Succeed())
		Consistently(func() bool { return reportExists(ctx, ns, "web-0") }, "2s").Should(BeTrue(), "the new pod's report is kept")
	})

	It("keeps a re-created pod's report while the operator's pod cache still holds the old pod", func(ctx SpecContext) {
		Expect(k8sClient.Create(ctx, newBreaker(ns, "carts"))).To(Succeed())
		reports(ctx, ns, "web-0", entry("carts", "Closed", "Started", time.Now(), 1))
		old := ensurePod(ctx, ns, "web-0")

		By("a pod cache that stops following the API server here, as a lagging informer would")
		pods, err := cache.New(cfg, cache.Options{Scheme: scheme, DefaultNamespaces: map[string]cache.Config{ns: {}}})
		Expect(err).NotTo(HaveOccurred())
		cacheCtx, stopCache := context.WithCancel(ctx)
		go func() { _ = pods.Start(cacheCtx) }()
		Eventually(func(g Gomega) {
			var list corev1.PodList
			g.Expect(pods.List(ctx, &list)).To(Succeed())
			g.Expect(list.Items).To(ConsistOf(HaveField("UID", old.UID)))
		}).Should(Succeed())
		stopCache()
		lagging, err := client.New(cfg, client.Options{Scheme: scheme, Cache: &client.CacheOptions{
			Reader:     pods,
			DisableFor: []client.Object{&resiliencev1alpha1.CircuitBreaker{}, &resiliencev1alpha1.BreakerReport{}, &resiliencev1alpha1.NodeBreakerReport{}, &corev1.ConfigMap{}},
		}})
		Expect(err).NotTo(HaveOccurred())

		deletePod(ctx, ns, "web-0")
		renewed := ensurePod(ctx, ns, "web-0")
		Expect(applyReport(ctx, ns, "web-0", renewed.UID, entry("carts", "Closed", "Started", time.Now(), 1))).To(Succeed())

		r := &CircuitBreakerReconciler{Client: lagging, APIReader: k8sClient, Recorder: reconciler.Recorder}
		_, err = r.ReconcileStatus(ctx, reconcile.Request{NamespacedName: configMapKey(ns)})
		Expect(err).NotTo(HaveOccurred())
		Expect(reportExists(ctx, ns, "web-0")).To(BeTrue(), "the new pod's report was taken for the old pod's and deleted")
	})

	It("counts nothing of a pod that finished", func(ctx SpecContext) {
		ledger := newBreaker(ns, "ledger")
		Expect(k8sClient.Create(ctx, ledger)).To(Succeed())
		reports(ctx, ns, "web", entry("ledger", "Closed", "Started", time.Now(), 1))
		reports(ctx, ns, "batch", entry("ledger", "Open", "Tripped", time.Now(), 1))
		Eventually(func(g Gomega) {
			cb := getBreaker(g, ctx, ns, "ledger")
			g.Expect(condition(cb, "Open").Status).To(Equal(metav1.ConditionTrue))
			g.Expect(cb.Status.MemberCounts.Reporting).To(BeEquivalentTo(2))
		}).Should(Succeed())

		By("the pod's phase going Succeeded")
		setPhase(ctx, ns, "batch", corev1.PodSucceeded)
		Eventually(func(g Gomega) {
			cb := getBreaker(g, ctx, ns, "ledger")
			g.Expect(cb.Status.State).To(Equal(resiliencev1alpha1.StateClosed))
			g.Expect(condition(cb, "Open").Status).To(Equal(metav1.ConditionFalse))
			g.Expect(*cb.Status.MemberCounts).To(Equal(resiliencev1alpha1.MemberCounts{Reporting: 1, Closed: 1, OnLatestConfig: 1}))
			g.Expect(listedPods(cb)).To(Equal([]string{"web"}))
		}).Should(Succeed())

		By("a pod that failed, then reports Open")
		ensurePod(ctx, ns, "evicted")
		setPhase(ctx, ns, "evicted", corev1.PodFailed)
		reports(ctx, ns, "evicted", entry("ledger", "Open", "Tripped", time.Now(), 1))
		Consistently(func(g Gomega) {
			cb := getBreaker(g, ctx, ns, "ledger")
			g.Expect(condition(cb, "Open").Status).To(Equal(metav1.ConditionFalse))
			g.Expect(cb.Status.MemberCounts.Reporting).To(BeEquivalentTo(1))
			g.Expect(listedPods(cb)).To(Equal([]string{"web"}))
		}, "2s").Should(Succeed())
		Expect(reportExists(ctx, ns, "batch")).To(BeTrue(), "a finished pod's report is ignored, not deleted: its pod still exists")

		By("a spec change that only the running pod follows")
		patch := client.MergeFrom(ledger.DeepCopy())
		ledger.Spec.FailureRatePercent = ptr.To[int32](30)
		Expect(k8sClient.Patch(ctx, ledger, patch)).To(Succeed())
		reports(ctx, ns, "web", entry("ledger", "Closed", "Started", time.Now(), 2))
		Eventually(func(g Gomega) {
			c := condition(getBreaker(g, ctx, ns, "ledger"), "ConfigApplied")
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue), c.Message)
			g.Expect(c.Message).To(Equal("All 1 pods run generation 2"))
		}).Should(Succeed())
	})

	It("counts 1,001 pods and lists the 20 most relevant", func(ctx SpecContext) {
		Expect(k8sClient.Create(ctx, newBreaker(ns, "catalog"))).To(Succeed())
		const pods = 1001
		names := make(chan string)
		var wg sync.WaitGroup
		var failures atomic.Int32
		for range 16 {
			wg.Go(func() {
				defer GinkgoRecover()
				for name := range names {
					state, reason := "Closed", "Started"
					if name == "pod-0500" {
						state, reason = "Open", "Tripped"
					}
					pod := &corev1.Pod{
						ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
						Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
					}
					if err := k8sClient.Create(ctx, pod); err != nil {
						failures.Add(1)
						continue
					}
					if err := applyReport(ctx, ns, name, pod.UID, entry("catalog", state, reason, time.Now(), 1)); err != nil {
						failures.Add(1)
					}
				}
			})
		}
		for i := range pods {
			names <- fmt.Sprintf("pod-%04d", i)
		}
		close(names)
		wg.Wait()
		Expect(failures.Load()).To(BeZero())

		Eventually(func(g Gomega) {
			cb := getBreaker(g, ctx, ns, "catalog")
			g.Expect(cb.Status.MemberCounts).NotTo(BeNil())
			g.Expect(*cb.Status.MemberCounts).To(Equal(resiliencev1alpha1.MemberCounts{Reporting: pods, Closed: pods - 1, Open: 1, OnLatestConfig: pods}))
			g.Expect(cb.Status.Members).To(HaveLen(resiliencev1alpha1.MaxMembersListed))
			g.Expect(cb.Status.Members[0].Pod).To(Equal("pod-0500"), "the open pod first")
			g.Expect(cb.Status.State).To(Equal(resiliencev1alpha1.StateOpen))
		}).WithTimeout(5 * time.Minute).Should(Succeed())
	}, SpecTimeout(10*time.Minute))

	It("writes a burst of reports in a few status writes, and nothing in steady state", func(ctx SpecContext) {
		Expect(k8sClient.Create(ctx, newBreaker(ns, "burst"))).To(Succeed())
		const pods = 50
		uids := make([]types.UID, pods)
		for i := range pods {
			name := fmt.Sprintf("web-%02d", i)
			uids[i] = ensurePod(ctx, ns, name).UID
			Expect(applyReport(ctx, ns, name, uids[i], entry("burst", "Closed", "Started", time.Now(), 1))).To(Succeed())
		}
		Eventually(func(g Gomega) {
			cb := getBreaker(g, ctx, ns, "burst")
			g.Expect(cb.Status.MemberCounts).NotTo(BeNil())
			g.Expect(cb.Status.MemberCounts.Closed).To(BeEquivalentTo(pods))
			g.Expect(condition(cb, "ConfigApplied").Status).To(Equal(metav1.ConditionTrue))
		}).Should(Succeed())

		var writes atomic.Int32
		var seen atomic.Value // the resourceVersion the watch delivered last
		seen.Store("")
		w, err := k8sClient.Watch(ctx, &resiliencev1alpha1.CircuitBreakerList{}, client.InNamespace(ns),
			client.MatchingFields{"metadata.name": "burst"})
		Expect(err).NotTo(HaveOccurred())
		defer w.Stop()
		go func() {
			for e := range w.ResultChan() {
				if e.Type == watch.Modified {
					writes.Add(1)
				}
				if o, ok := e.Object.(client.Object); ok {
					seen.Store(o.GetResourceVersion())
				}
			}
		}()
		// Let the last writes of the setup settle before counting.
		Eventually(func() int32 {
			before := writes.Load()
			time.Sleep(2 * time.Second)
			return writes.Load() - before
		}).Should(BeZero())
		writes.Store(0)

		By("every pod tripping at once")
		var wg sync.WaitGroup
		for i := range pods {
			wg.Go(func() {
				defer GinkgoRecover()
				Expect(applyReport(ctx, ns, fmt.Sprintf("web-%02d", i), uids[i], entry("burst", "Open", "Tripped", time.Now(), 1))).To(Succeed())
			})
		}
		wg.Wait()
		var settled string
		Eventually(func(g Gomega) {
			cb := getBreaker(g, ctx, ns, "burst")
			g.Expect(cb.Status.MemberCounts.Open).To(BeEquivalentTo(pods))
			g.Expect(condition(cb, "Open").Status).To(Equal(metav1.ConditionTrue))
			settled = cb.ResourceVersion
		}).Should(Succeed())
		// The watch may deliver the write just read a moment later.
		Eventually(func() any { return seen.Load() }).Should(Equal(settled))
		burst := writes.Load()
		GinkgoWriter.Printf("status writes for a burst of %d reports: %d\n", pods, burst)
		Expect(burst).To(And(BeNumerically(">=", 1), BeNumerically("<=", 10)))

		By("steady state")
		Consistently(func() int32 { return writes.Load() }, "3s").Should(Equal(burst))
	})
})
