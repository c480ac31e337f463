package cluster

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// The example as examples/in-cluster/deploy/app.yaml deploys it.
const (
	exampleNamespace = "fusebox-example"
	exampleBreaker   = "flaky-upstream"
	// The Deployment of app.yaml, whose pods the injection webhook gives the config as a
	// volume (FUSEBOX_CONFIG_DIR).
	volumeApp = "in-cluster"
	// A copy of it without the injection annotation, whose pods watch the config through
	// the API: the other source the library has.
	apiApp = "in-cluster-api"
)

func appLabels(app string) client.MatchingLabels {
	return client.MatchingLabels{"app.kubernetes.io/name": app}
}

// readManifests decodes a multi-document YAML file.
func readManifests(path string) []*unstructured.Unstructured {
	GinkgoHelper()
	data, err := os.ReadFile(path)
	Expect(err).NotTo(HaveOccurred())
	return decodeManifests(data, path)
}

// decodeManifests decodes multi-document YAML; what names it in a failure.
func decodeManifests(data []byte, what string) []*unstructured.Unstructured {
	GinkgoHelper()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var objs []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		err := dec.Decode(&u.Object)
		if errors.Is(err, io.EOF) {
			return objs
		}
		Expect(err).NotTo(HaveOccurred(), "parse %s", what)
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}

// apply is `kubectl apply --server-side` of one object.
func apply(ctx context.Context, u *unstructured.Unstructured) {
	GinkgoHelper()
	Expect(k8s.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("kubectl"), client.ForceOwnership)).
		To(Succeed(), "apply %s %s", u.GetKind(), u.GetName())
}

func toUnstructured(obj runtime.Object, gvk string) *unstructured.Unstructured {
	GinkgoHelper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	Expect(err).NotTo(HaveOccurred())
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion("apps/v1")
	u.SetKind(gvk)
	unstructured.RemoveNestedField(u.Object, "status")
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(u.Object, "spec", "template", "metadata", "creationTimestamp")
	return u
}

// forTheSuite is what the suite changes in the example's Deployment, and only that: the
// image when it was built under another name, a pull policy that never asks a registry
// (the node has no way out), and the upstream starting healthy with its control endpoint
// on, so that the specs fail it on command instead of every 5 seconds.
func forTheSuite(d *appsv1.Deployment) {
	c := &d.Spec.Template.Spec.Containers[0]
	if *exampleImage != "" {
		c.Image = *exampleImage
	}
	c.ImagePullPolicy = corev1.PullIfNotPresent
	c.Env = append(c.Env, corev1.EnvVar{Name: "UPSTREAM_HEALTH", Value: "up"}, corev1.EnvVar{Name: "CONTROL_ADDR", Value: ":8080"})
}

// report is the pod's BreakerReport entry for the example's breaker, or nil.
func reportEntry(rep *resiliencev1alpha1.BreakerReport) *resiliencev1alpha1.BreakerReportEntry {
	for i := range rep.Breakers {
		if rep.Breakers[i].Name == exampleBreaker {
			return &rep.Breakers[i]
		}
	}
	return nil
}

// expectReports checks that each pod has written its own report, owned by its Pod, on
// config generation gen, with the circuit closed.
func expectReports(ctx context.Context, ps []corev1.Pod, gen int64) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		for _, p := range ps {
			var rep resiliencev1alpha1.BreakerReport
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(&p), &rep)).To(Succeed(), "the report of pod %s", p.Name)
			g.Expect(rep.OwnerReferences).To(HaveLen(1))
			own := rep.OwnerReferences[0]
			g.Expect([]string{own.Kind, own.Name, string(own.UID)}).To(Equal([]string{"Pod", p.Name, string(p.UID)}), "the owner of %s's report", p.Name)
			e := reportEntry(&rep)
			g.Expect(e).NotTo(BeNil(), "pod %s reports no %s: %+v", p.Name, exampleBreaker, rep.Breakers)
			g.Expect(e.ConfigGeneration).To(Equal(gen), "pod %s's config generation", p.Name)
			g.Expect(e.ConfigError).To(BeEmpty())
			g.Expect(e.State).To(Equal(resiliencev1alpha1.StateClosed), "pod %s's state", p.Name)
		}
	}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())
}

func exampleBreakerNow(ctx context.Context) *resiliencev1alpha1.CircuitBreaker {
	GinkgoHelper()
	var cb resiliencev1alpha1.CircuitBreaker
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: exampleNamespace, Name: exampleBreaker}, &cb)).To(Succeed())
	return &cb
}

// allAppPods are the example's pods of both Deployments.
func allAppPods(ctx context.Context) []corev1.Pod {
	return append(pods(ctx, exampleNamespace, appLabels(volumeApp)), pods(ctx, exampleNamespace, appLabels(apiApp))...)
}

// incident fails the upstream of every example pod until the CircuitBreaker says Open
// (`kubectl wait --for=condition=Open`), then heals it until it says it no longer is; it
// returns how long each took.
func incident(ctx context.Context) (toOpen, toClosed time.Duration) {
	GinkgoHelper()
	ps := allAppPods(ctx)
	start := time.Now()
	setUpstream(ctx, ps, "down")
	out, err := kubectl(ctx, "", "-n", exampleNamespace, "wait", "--for=condition=Open", "circuitbreaker/"+exampleBreaker, "--timeout=90s")
	Expect(err).NotTo(HaveOccurred(), out)
	toOpen = time.Since(start)
	start = time.Now()
	setUpstream(ctx, ps, "up")
	out, err = kubectl(ctx, "", "-n", exampleNamespace, "wait", "--for=condition=Open=false", "circuitbreaker/"+exampleBreaker, "--timeout=90s")
	Expect(err).NotTo(HaveOccurred(), out)
	toClosed = time.Since(start)
	return toOpen, toClosed
}

func exampleSpecs() {
	It("runs the example from its YAML: injected, configured from the cluster, one report per pod", func(ctx SpecContext) {
		objs := readManifests(filepath.Join(*repoRoot, "examples", "in-cluster", "deploy", "app.yaml"))
		var deploy appsv1.Deployment
		for _, u := range objs {
			if u.GetKind() != "Deployment" {
				apply(ctx, u)
				continue
			}
			Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &deploy)).To(Succeed())
		}
		Expect(deploy.Name).To(Equal(volumeApp), "app.yaml's Deployment")
		Expect(deploy.Spec.Replicas).To(HaveValue(BeEquivalentTo(3)), "app.yaml runs 3 replicas")
		Expect(deploy.Spec.Template.Annotations).To(HaveKeyWithValue("fusebox.dev/inject", "true"))
		forTheSuite(&deploy)

		api := deploy.DeepCopy()
		api.Name, api.Spec.Replicas = apiApp, ptrInt32(2)
		api.Labels = map[string]string{"app.kubernetes.io/name": apiApp}
		api.Spec.Selector = &metav1.LabelSelector{MatchLabels: api.Labels}
		api.Spec.Template.Labels = api.Labels
		delete(api.Spec.Template.Annotations, "fusebox.dev/inject")

		start := time.Now()
		apply(ctx, toUnstructured(&deploy, "Deployment"))
		apply(ctx, toUnstructured(api, "Deployment"))
		var volumePods, apiPods []corev1.Pod
		Eventually(func(g Gomega) {
			volumePods, apiPods = pods(ctx, exampleNamespace, appLabels(volumeApp)), pods(ctx, exampleNamespace, appLabels(apiApp))
			g.Expect(volumePods).To(HaveLen(3))
			g.Expect(apiPods).To(HaveLen(2))
			for _, p := range append(volumePods, apiPods...) {
				g.Expect(running(&p)).To(BeTrue(), "pod %s: %s %+v", p.Name, p.Status.Phase, p.Status.ContainerStatuses)
			}
		}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
		record("apply → 5 example pods Running", time.Since(start), "3 injected (volume source) + 2 API source, image already on the node")

		// The injection webhook mutated the pods that run: the volume and the variable
		// only it adds, and nothing in the pods it must leave alone.
		for _, p := range volumePods {
			Expect(envOf(&p, "FUSEBOX_CONFIG_DIR")).To(Equal("/etc/fusebox"), "pod %s was not injected", p.Name)
			Expect(p.Spec.Volumes).To(ContainElement(HaveField("Name", "fusebox-breakers")))
		}
		for _, p := range apiPods {
			Expect(envOf(&p, "FUSEBOX_CONFIG_DIR")).To(BeEmpty(), "pod %s was injected without the annotation", p.Name)
		}

		// Each pod, on its own bound token, reports the CircuitBreaker's published config.
		cb := exampleBreakerNow(ctx)
		expectReports(ctx, append(volumePods, apiPods...), cb.Generation)
		var reports resiliencev1alpha1.BreakerReportList
		Expect(k8s.List(ctx, &reports, client.InNamespace(exampleNamespace))).To(Succeed())
		Expect(reports.Items).To(HaveLen(5), "one report per pod, no more")
		Eventually(func(g Gomega) {
			cb := exampleBreakerNow(ctx)
			g.Expect(cb.Status.State).To(Equal(resiliencev1alpha1.StateClosed))
			g.Expect(meta.IsStatusConditionTrue(cb.Status.Conditions, resiliencev1alpha1.ConditionConfigApplied)).To(BeTrue())
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	}, SpecTimeout(6*time.Minute))

	It("opens the CircuitBreaker when the upstream fails, and closes it when the upstream recovers", func(ctx SpecContext) {
		needKubectl()
		since := time.Now()
		toOpen, toClosed := incident(ctx)
		record("upstream down → Open=True (kubectl wait)", toOpen, "5 real pods, window 2s, ≥5 calls at 10/s")
		record("upstream up → Open=False (kubectl wait)", toClosed, "openTimeout 2s, 2 probes")
		var events corev1.EventList
		Expect(k8s.List(ctx, &events, client.InNamespace(exampleNamespace))).To(Succeed())
		var opened int
		for _, e := range events.Items {
			if e.InvolvedObject.Name == exampleBreaker && e.Reason == resiliencev1alpha1.EventCircuitOpened && !eventTime(&e).Before(since.Add(-time.Second)) {
				opened++
			}
		}
		Expect(opened).To(BeNumerically(">=", 1), "no CircuitOpened Event")
	}, SpecTimeout(4*time.Minute))
}

func envOf(p *corev1.Pod, name string) string {
	for _, e := range p.Spec.Containers[0].Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

func ptrInt32(n int32) *int32 { return &n }

// isForbidden is a write the API server refused: by RBAC, or by an admission policy.
func isForbidden(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsInvalid(err)
}
