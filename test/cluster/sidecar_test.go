package cluster

import (
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// A namespace of its own for the sidecar's pod: the example's specs count the reports
// in theirs.
const (
	sidecarNamespace = "fusebox-sidecar"
	sidecarBreaker   = "payments-api"
	sidecarPod       = "php-like-worker"
)

// What the pod webhook injects (pkg/webhook/podinject, docs/fuseboxd.md), spelled as a
// user reads it: importing podinject would bring the webhook server's dependencies into
// this module.
const (
	sidecarAnnotation = "fusebox.dev/sidecar"
	sidecarContainer  = "fuseboxd"
	socketVolume      = "fusebox-socket"
	socketDir         = "/var/run/fusebox"
)

// What a team does to use fuseboxd from a pod of any language: the breaker, an identity
// for the pod that may write its report (docs/rbac.md), and the annotation on the pod.
// The circuit opens on 5 failed calls in 10 s and stays open a minute, long after the
// spec has looked.
var sidecarManifests = `
apiVersion: v1
kind: Namespace
metadata:
  name: ` + sidecarNamespace + `
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: worker
  namespace: ` + sidecarNamespace + `
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: worker-breaker-client
  namespace: ` + sidecarNamespace + `
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: fusebox-breaker-client
subjects:
- kind: ServiceAccount
  name: worker
  namespace: ` + sidecarNamespace + `
---
apiVersion: resilience.fusebox.dev/v1alpha1
kind: CircuitBreaker
metadata:
  name: ` + sidecarBreaker + `
  namespace: ` + sidecarNamespace + `
spec:
  openTimeout: 60s
  window: 10s
  failureRatePercent: 50
  minimumThroughput: 5
  mode: Enforce
  scope: Pod
`

// workerPod is a pod that asks for the sidecar and runs hack/fuseboxd-worker, which
// reports every call to payments-api as failed, five a second, through the socket.
func workerPod(image string) *corev1.Pod {
	nonRoot := true
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: sidecarNamespace, Name: sidecarPod,
			Annotations: map[string]string{sidecarAnnotation: "true"},
		},
		Spec: corev1.PodSpec{
			ServiceAccountName:            "worker",
			TerminationGracePeriodSeconds: ptrInt64(5),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   &nonRoot,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name: "worker", Image: image, ImagePullPolicy: corev1.PullIfNotPresent,
				Env: []corev1.EnvVar{
					{Name: "BREAKER", Value: sidecarBreaker},
					{Name: "OUTCOME", Value: "failure"},
					{Name: "INTERVAL", Value: "200ms"},
				},
			}},
		},
	}
}

func sidecarSpecs() {
	It("gives an annotated pod the fuseboxd sidecar, whose socket a container uses and whose report the pod writes", func(ctx SpecContext) {
		sidecarImage := need("FUSEBOXD_IMAGE (-fuseboxd-image)", *fuseboxdImage)
		worker := need("WORKER_IMAGE (-worker-image)", *workerImage)
		for _, u := range decodeManifests([]byte(sidecarManifests), "the sidecar's manifests") {
			apply(ctx, u)
		}
		DeferCleanup(func(ctx SpecContext) {
			Expect(client.IgnoreNotFound(k8s.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: sidecarNamespace}}))).To(Succeed())
		})
		// Published first, so that the sidecar's first read finds the breaker (the
		// kubelet would fill the optional volume in later anyway, within its sync period).
		var cb resiliencev1alpha1.CircuitBreaker
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: sidecarNamespace, Name: sidecarBreaker}, &cb)).To(Succeed())
			g.Expect(cb.Status.ConfigMapName).NotTo(BeEmpty())
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed(), "the CircuitBreaker was not published")

		start := time.Now()
		p := workerPod(worker)
		Expect(k8s.Create(ctx, p)).To(Succeed())

		// The webhook's patch, as the API server stored it: the native sidecar first,
		// with the operator's --fuseboxd-image, and the socket's emptyDir in both.
		Expect(p.Spec.InitContainers).NotTo(BeEmpty(), "no sidecar was injected")
		sc := p.Spec.InitContainers[0]
		Expect(sc.Name).To(Equal(sidecarContainer))
		Expect(sc.Image).To(Equal(sidecarImage), "the chart's fuseboxd.image, through the manager's --fuseboxd-image")
		Expect(sc.RestartPolicy).To(HaveValue(Equal(corev1.ContainerRestartPolicyAlways)))
		Expect(sc.StartupProbe).NotTo(BeNil(), "the sidecar has no startup probe")
		Expect(sc.StartupProbe.Exec).To(HaveField("Command", ContainElement("probe")))
		Expect(p.Spec.Volumes).To(ContainElement(And(HaveField("Name", socketVolume), HaveField("EmptyDir", Not(BeNil())))))
		for _, c := range []corev1.Container{sc, p.Spec.Containers[0]} {
			Expect(c.VolumeMounts).To(ContainElement(And(HaveField("Name", socketVolume), HaveField("MountPath", socketDir))), "container %s", c.Name)
		}

		// Both run: the sidecar as a started init container, the worker as the container.
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
			g.Expect(running(p)).To(BeTrue(), "pod %s: %s %+v", p.Name, p.Status.Phase, p.Status.ContainerStatuses)
			g.Expect(p.Status.InitContainerStatuses).To(ContainElement(And(
				HaveField("Name", sidecarContainer), HaveField("State.Running", Not(BeNil())),
				HaveField("Started", HaveValue(BeTrue())))), "the sidecar, its startup probe passed: %+v", p.Status.InitContainerStatuses)
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
		record("annotated pod created → sidecar and worker Running", time.Since(start), "images already on the node")

		// The startup probe held the worker back until the socket answered: its very
		// first call got an answer, not a refused connection.
		Eventually(func(g Gomega) {
			out, err := clientset.CoreV1().Pods(sidecarNamespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: "worker"}).DoRaw(ctx)
			g.Expect(err).NotTo(HaveOccurred())
			first, _, _ := strings.Cut(string(out), "\n")
			g.Expect(first).To(HavePrefix("acquire "), "no call logged yet")
			g.Expect(first).NotTo(HavePrefix("acquire error"), "the worker started before the sidecar served:\n%s", tail(string(out), 10))
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())

		// The worker's failures, through the socket, open the circuit: the pod's report,
		// written by the sidecar as the pod (the admission policy lets no other identity
		// write it, test "pod identity"), says so, and so does the CircuitBreaker.
		Eventually(func(g Gomega) {
			var rep resiliencev1alpha1.BreakerReport
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), &rep)).To(Succeed(), "the report of pod %s", p.Name)
			g.Expect(rep.OwnerReferences).To(ContainElement(And(HaveField("Kind", "Pod"), HaveField("UID", p.UID))))
			g.Expect(rep.ManagedFields).To(ContainElement(HaveField("Manager", "fusebox-pod")), "written by the pod's agent")
			var entry *resiliencev1alpha1.BreakerReportEntry
			for i := range rep.Breakers {
				if rep.Breakers[i].Name == sidecarBreaker {
					entry = &rep.Breakers[i]
				}
			}
			g.Expect(entry).NotTo(BeNil(), "the report has no %s: %+v", sidecarBreaker, rep.Breakers)
			g.Expect(entry.ConfigGeneration).To(Equal(cb.Generation))
			g.Expect(entry.State).To(Equal(resiliencev1alpha1.StateOpen))
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
		record("sidecar's pod created → its report Open", time.Since(start), "5 failed calls through the socket at 5/s")
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(&cb), &cb)).To(Succeed())
			g.Expect(cb.Status.State).To(Equal(resiliencev1alpha1.StateOpen))
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed(), "the CircuitBreaker did not add up the pod's report")

		// And the worker was told so: refused with 429 and the open state.
		Eventually(func(g Gomega) {
			out, err := clientset.CoreV1().Pods(sidecarNamespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: "worker"}).DoRaw(ctx)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(lastLine(string(out), "acquire 201")).NotTo(BeEmpty(), "the worker never got a permit:\n%s", out)
			g.Expect(lastLine(string(out), "settle failure 204")).NotTo(BeEmpty(), "the worker never settled one:\n%s", out)
			refused := lastLine(string(out), "acquire 429")
			g.Expect(refused).To(ContainSubstring(`"state":"open"`), "the worker was never refused:\n%s", tail(string(out), 10))
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	}, SpecTimeout(5*time.Minute))
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
