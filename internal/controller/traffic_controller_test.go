package controller

import (
	"encoding/json"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// withTraffic is a report entry carrying a window's traffic.
func withTraffic(e breakerconfig.ReportEntry, requests, accepts, retries, throttled int64) breakerconfig.ReportEntry {
	e.Requests, e.Accepts, e.Retries, e.Throttled = &requests, &accepts, &retries, &throttled
	return e
}

// publishedFleet returns the fleet object published for a breaker, nil when there is none.
func publishedFleet(doc map[string]any) map[string]any {
	f, _ := doc["fleet"].(map[string]any)
	return f
}

var _ = Describe("Fleet traffic (issue 22)", func() {
	var ns string
	BeforeEach(func(ctx SpecContext) { ns = newNamespace(ctx) })

	It("publishes the fleet's pods, requests and accepts, and shows its ratios in status", func(ctx SpecContext) {
		cb := newBreaker(ns, "payments", func(s *resiliencev1alpha1.CircuitBreakerSpec) {
			s.RetryBudget = &resiliencev1alpha1.RetryBudget{Percent: ptr.To[int32](20), MinPerSecond: ptr.To[int32](10)}
			s.Throttle = &resiliencev1alpha1.Throttle{K: ptr.To(2.0)}
		})
		Expect(k8sClient.Create(ctx, cb)).To(Succeed())
		Expect(k8sClient.Create(ctx, newBreaker(ns, "plain"))).To(Succeed())
		Eventually(func(g Gomega) {
			doc := published(g, ctx, ns, "payments")
			g.Expect(doc["retryBudget"]).To(Equal(map[string]any{"percent": 20.0, "minPerSecond": 10.0}))
			g.Expect(doc["throttle"]).To(Equal(map[string]any{"k": 2.0}))
			g.Expect(publishedFleet(doc)).To(Equal(map[string]any{"pods": 0.0, "requests": 0.0, "accepts": 0.0}))
			g.Expect(published(g, ctx, ns, "plain")).NotTo(HaveKey("fleet"))
		}).Should(Succeed())

		now := time.Now()
		reports(ctx, ns, "pod-a", withTraffic(entry("payments", "Closed", "Started", now, 1), 100, 50, 10, 20), entry("plain", "Closed", "Started", now, 1))
		reports(ctx, ns, "pod-b", withTraffic(entry("payments", "Closed", "Started", now, 1), 200, 100, 20, 30))
		reports(ctx, ns, "pod-c", entry("payments", "Open", "Adopted", now, 1)) // open: its window says nothing
		// The median pod's window, not the sums (docs/design.md §5.17): every window's
		// rejection probability is 0 at k = 2, the most requests first, and the lower
		// middle of three is pod-a's.
		Eventually(func(g Gomega) {
			g.Expect(publishedFleet(published(g, ctx, ns, "payments"))).To(Equal(map[string]any{"pods": 3.0, "requests": 100.0, "accepts": 50.0}))
		}).Should(Succeed())
		Eventually(func(g Gomega) {
			got := getBreaker(g, ctx, ns, "payments").Status.Traffic
			g.Expect(got).NotTo(BeNil())
			g.Expect(*got).To(Equal(resiliencev1alpha1.FleetTraffic{Pods: 3, Requests: 300, Accepts: 150, Retries: 30, Throttled: 50,
				RetryPercent: ptr.To[int32](11), ThrottledPercent: ptr.To[int32](17)}))
			g.Expect(getBreaker(g, ctx, ns, "plain").Status.Traffic).To(BeNil())
		}).Should(Succeed())

		By("a pod that finished counts for nothing")
		setPhase(ctx, ns, "pod-b", corev1.PodSucceeded)
		Eventually(func(g Gomega) {
			g.Expect(publishedFleet(published(g, ctx, ns, "payments"))).To(Equal(map[string]any{"pods": 2.0, "requests": 100.0, "accepts": 50.0}))
			g.Expect(getBreaker(g, ctx, ns, "payments").Status.Traffic.Requests).To(Equal(int64(100)))
		}).Should(Succeed())
	})

	It("publishes a change of the fleet counts alone at most once a second, and the last one", func(ctx SpecContext) {
		Expect(k8sClient.Create(ctx, newBreaker(ns, "search", func(s *resiliencev1alpha1.CircuitBreakerSpec) {
			s.Throttle = &resiliencev1alpha1.Throttle{}
		}))).To(Succeed())
		now := time.Now()
		reports(ctx, ns, "pod-a", withTraffic(entry("search", "Closed", "Started", now, 1), 10, 10, 0, 0))
		Eventually(func(g Gomega) {
			g.Expect(publishedFleet(published(g, ctx, ns, "search"))).To(HaveKeyWithValue("requests", 10.0))
		}).Should(Succeed())

		w, err := k8sClient.Watch(ctx, &corev1.ConfigMapList{}, client.InNamespace(ns))
		Expect(err).NotTo(HaveOccurred())
		defer w.Stop()
		type write struct {
			at       time.Time
			requests float64
		}
		var writes []write
		done := make(chan struct{})
		go func() {
			defer GinkgoRecover()
			defer close(done)
			for ev := range w.ResultChan() {
				cm, ok := ev.Object.(*corev1.ConfigMap)
				if !ok || ev.Type != watch.Modified {
					continue
				}
				var doc struct{ Fleet breakerconfig.Fleet }
				if json.Unmarshal([]byte(cm.Data[breakerconfig.Key("search")]), &doc) == nil {
					writes = append(writes, write{time.Now(), float64(doc.Fleet.Requests)})
				}
			}
		}()

		// A pod whose traffic moves every 50 ms for 3 s: 60 reports.
		start := time.Now()
		var last int64
		for i := int64(1); time.Since(start) < 3*time.Second; i++ {
			last = 10 + i
			reports(ctx, ns, "pod-a", withTraffic(entry("search", "Closed", "Started", now, 1), last, last, 0, 0))
			time.Sleep(50 * time.Millisecond)
		}
		Eventually(func(g Gomega) {
			g.Expect(publishedFleet(published(g, ctx, ns, "search"))).To(HaveKeyWithValue("requests", float64(last)))
		}).Should(Succeed())
		w.Stop()
		<-done
		GinkgoWriter.Printf("%d ConfigMap writes for %d traffic reports in %s\n", len(writes), last-10, time.Since(start).Round(time.Millisecond))
		// One write a second while the reports last, and the last after they stop. Counted
		// over the whole span, not write by write: the watch's delivery on a loaded
		// machine bunches writes a second apart by the operator's clock. The bound still
		// tells the fleet's interval from the 250 ms of any other change, which would
		// write four times as often.
		span := time.Since(start)
		Expect(len(writes)).To(BeNumerically(">=", 2))
		Expect(len(writes)).To(BeNumerically("<=", int(span/minFleetInterval)+2))
	})
})
