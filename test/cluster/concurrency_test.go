package cluster

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// One limit on calls in flight for the pods of both nodes (docs/design.md §5.18): four
// pods, two per node, each with the fuseboxd sidecar and three callers holding every
// permit 3 s (a slow dependency), under spec.concurrency.maxInFlight 4. The operator
// divides it into shares of 1, so each pod has one call in flight and refuses the other
// two with reason "concurrency"; the refusals are no failures, so the circuit stays
// closed.
const (
	bulkheadNamespace = "fusebox-bulkhead"
	bulkheadBreaker   = "inventory-db"
	bulkheadLimit     = 4
	bulkheadPods      = 4
)

var bulkheadManifests = `
apiVersion: v1
kind: Namespace
metadata:
  name: ` + bulkheadNamespace + `
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: worker
  namespace: ` + bulkheadNamespace + `
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: worker-breaker-client
  namespace: ` + bulkheadNamespace + `
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: fusebox-breaker-client
subjects:
- kind: ServiceAccount
  name: worker
  namespace: ` + bulkheadNamespace + `
---
apiVersion: resilience.fusebox.dev/v1alpha1
kind: CircuitBreaker
metadata:
  name: ` + bulkheadBreaker + `
  namespace: ` + bulkheadNamespace + `
spec:
  window: 10s
  scope: Pod
  concurrency:
    maxInFlight: ` + fmt.Sprint(bulkheadLimit) + `
`

func concurrencySpecs() {
	It("divides one limit on calls in flight among the pods of both nodes, which refuse past their share with reason concurrency", func(ctx SpecContext) {
		nodes := needNodes(ctx, 2)
		worker := need("WORKER_IMAGE (-worker-image)", *workerImage)
		for _, u := range decodeManifests([]byte(bulkheadManifests), "the bulkhead's manifests") {
			apply(ctx, u)
		}
		DeferCleanup(func(ctx SpecContext) {
			Expect(client.IgnoreNotFound(k8s.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: bulkheadNamespace}}))).To(Succeed())
		})
		Eventually(func(g Gomega) {
			var cb resiliencev1alpha1.CircuitBreaker
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: bulkheadNamespace, Name: bulkheadBreaker}, &cb)).To(Succeed())
			g.Expect(cb.Status.ConfigMapName).NotTo(BeEmpty())
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed(), "the CircuitBreaker was not published")

		var pods []*corev1.Pod
		for i := range bulkheadPods {
			p := workerPod(worker)
			p.Namespace, p.Name = bulkheadNamespace, fmt.Sprintf("caller-%d", i)
			p.Spec.NodeName = nodes[i%2].Name
			p.Spec.Containers[0].Env = []corev1.EnvVar{
				{Name: "BREAKER", Value: bulkheadBreaker},
				{Name: "OUTCOME", Value: "success"},
				{Name: "INTERVAL", Value: "200ms"},
				{Name: "CALLERS", Value: "3"},
				{Name: "HOLD", Value: "3s"},
			}
			Expect(k8s.Create(ctx, p)).To(Succeed())
			pods = append(pods, p)
		}

		// The division: four pods counted, a share of one each.
		start := time.Now()
		var cb resiliencev1alpha1.CircuitBreaker
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: bulkheadNamespace, Name: bulkheadBreaker}, &cb)).To(Succeed())
			c := cb.Status.Concurrency
			g.Expect(c).NotTo(BeNil(), "no status.concurrency")
			g.Expect(c.MaxInFlight).To(BeEquivalentTo(bulkheadLimit))
			g.Expect(c.Pods).To(BeEquivalentTo(bulkheadPods), "the pods of both nodes counted")
			g.Expect(c.Share).To(BeEquivalentTo(bulkheadLimit / bulkheadPods))
		}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())
		record("4 sidecar pods on 2 nodes created → status.concurrency shares of 1", time.Since(start), "maxInFlight 4")

		// Each pod, on either node, refuses past its share: 429, reason concurrency.
		for _, p := range pods {
			Eventually(func(g Gomega) {
				out, err := clientset.CoreV1().Pods(bulkheadNamespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: "worker"}).DoRaw(ctx)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(lastLine(string(out), "settle success 204")).NotTo(BeEmpty(), "pod %s never completed a call:\n%s", p.Name, tail(string(out), 10))
				refused := lastLine(string(out), "acquire 429")
				g.Expect(refused).To(ContainSubstring(`"reason":"concurrency"`), "pod %s was never refused by the limit:\n%s", p.Name, tail(string(out), 10))
				g.Expect(refused).To(ContainSubstring(`"state":"closed"`))
			}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
		}

		// The refusals add up in status.concurrency, and the circuit stays closed: a call
		// the limit refused never failed.
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: bulkheadNamespace, Name: bulkheadBreaker}, &cb)).To(Succeed())
			g.Expect(cb.Status.Concurrency).NotTo(BeNil())
			g.Expect(cb.Status.Concurrency.Limited).To(BeNumerically(">", 0), "no refusal added up")
			g.Expect(cb.Status.Concurrency.InFlight).To(BeNumerically("<=", bulkheadLimit), "the pods' peaks are each at most the share")
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
		Expect(cb.Status.State).To(Equal(resiliencev1alpha1.StateClosed), "refusals by the limit opened the circuit")
	}, SpecTimeout(6*time.Minute))
}
