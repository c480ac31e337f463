package cluster

import (
	"fmt"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// The bounds the specs hold the two config sources to. The API source is a watch: the
// operator publishes, each pod's watch delivers, each pod reports, in about a second on
// this node (the timings table records it; docs/cluster.md). Its bound is a busy machine's,
// and still below what a pod that waited for its volume would take with a kubelet of the
// default resync. The volume source waits for the kubelet to rewrite the volume, which it
// does on its periodic resync of the pod (syncFrequency, 1 minute by default, plus jitter)
// and not when the ConfigMap changes; hack/cluster's kubelet resyncs every 10 s, and the
// bound covers the default too.
const (
	apiSourceBound    = 30 * time.Second
	volumeSourceBound = 3 * time.Minute
)

func propagationSpecs() {
	It("brings a spec change to every pod: through the API at once, through the volume when the kubelet refreshes it", func(ctx SpecContext) {
		apiPods, volumePods := pods(ctx, exampleNamespace, appLabels(apiApp)), pods(ctx, exampleNamespace, appLabels(volumeApp))
		Expect(apiPods).NotTo(BeEmpty())
		Expect(volumePods).NotTo(BeEmpty())
		waitWebhooks(ctx)
		cb := exampleBreakerNow(ctx)
		Expect(cb.Spec.MinimumThroughput).NotTo(BeNil())
		patch := client.MergeFrom(cb.DeepCopy())
		*cb.Spec.MinimumThroughput++
		start := time.Now()
		Expect(k8s.Patch(ctx, cb, patch)).To(Succeed())
		gen := cb.Generation

		// When each pod's report first shows the new generation, polled every 50 ms.
		arrived := map[string]time.Duration{}
		all := append(append([]corev1.Pod{}, apiPods...), volumePods...)
		Eventually(func(g Gomega) {
			var reports resiliencev1alpha1.BreakerReportList
			g.Expect(k8s.List(ctx, &reports, client.InNamespace(exampleNamespace))).To(Succeed())
			for i := range reports.Items {
				rep := &reports.Items[i]
				if e := reportEntry(rep); e != nil && e.ConfigGeneration >= gen {
					if _, seen := arrived[rep.Name]; !seen {
						arrived[rep.Name] = time.Since(start)
					}
				}
			}
			for _, p := range all {
				g.Expect(arrived).To(HaveKey(p.Name), "pod %s still runs an older config", p.Name)
			}
		}).WithContext(ctx).WithTimeout(volumeSourceBound).WithPolling(50 * time.Millisecond).Should(Succeed())

		slowest := func(ps []corev1.Pod) (time.Duration, string) {
			var ds []time.Duration
			for _, p := range ps {
				ds = append(ds, arrived[p.Name].Round(10*time.Millisecond))
			}
			slices.Sort(ds)
			return ds[len(ds)-1], fmt.Sprintf("%d pods: %v", len(ps), ds)
		}
		apiWorst, apiNote := slowest(apiPods)
		volumeWorst, volumeNote := slowest(volumePods)
		record("spec change → every API-source pod reports it", apiWorst, apiNote)
		record("spec change → every volume-source pod reports it", volumeWorst, volumeNote+" (kubelet volume refresh)")
		Expect(apiWorst).To(BeNumerically("<=", apiSourceBound), "the API source took %v: %s", apiWorst, apiNote)

		Eventually(func(g Gomega) {
			cb := exampleBreakerNow(ctx)
			g.Expect(cb.Status.ObservedGeneration).To(Equal(gen))
			g.Expect(cb.Status.Conditions).To(ContainElement(And(
				HaveField("Type", resiliencev1alpha1.ConditionConfigApplied), HaveField("Status", BeEquivalentTo("True")))))
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	}, SpecTimeout(5*time.Minute))
}
