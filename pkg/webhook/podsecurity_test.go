package webhook_test

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/webhook/podinject"
)

// restrictedPod is a pod that meets Pod Security's restricted level on its own.
func restrictedPod(ns string, annotations map[string]string) *corev1.Pod {
	no, yes := false, true
	p := pod(ns, annotations, corev1.Container{Name: "app", Image: "app", SecurityContext: &corev1.SecurityContext{
		AllowPrivilegeEscalation: &no,
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}})
	p.Spec.SecurityContext = &corev1.PodSecurityContext{
		RunAsNonRoot:   &yes,
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	return p
}

// labelledNamespace creates a namespace of the spec's own with labels.
func labelledNamespace(prefix string, labels map[string]string) string {
	GinkgoHelper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix, Labels: labels}}
	Expect(k8sClient.Create(context.Background(), ns)).To(Succeed())
	DeferCleanup(func() { _ = k8sClient.Delete(context.Background(), ns) })
	return ns.Name
}

var _ = Describe("Pod Security restricted", func() {
	ctx := context.Background()
	BeforeEach(func() { ensureAgentService(ctx) })

	It("admits compliant pods annotated for the sidecar, the node agent or both in a namespace that enforces restricted", func() {
		ns := labelledNamespace("restricted-", map[string]string{"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"})

		// The control: the API server enforces the level here.
		bare := pod(ns, nil)
		Expect(k8sClient.Create(ctx, bare)).To(MatchError(ContainSubstring(`violates PodSecurity "restricted:latest"`)))
		Expect(k8sClient.Create(ctx, restrictedPod(ns, nil))).To(Succeed())

		for _, annotations := range []map[string]string{
			{resiliencev1alpha1.AnnotationSidecar: "true"},
			{resiliencev1alpha1.AnnotationSidecar: "true", resiliencev1alpha1.AnnotationInject: "true"},
			nodeAgentOptIn,
			{resiliencev1alpha1.AnnotationSidecar: "true", resiliencev1alpha1.AnnotationNodeAgent: "true"},
		} {
			p := restrictedPod(ns, annotations)
			Expect(k8sClient.Create(ctx, p)).To(Succeed(), "annotations %v", annotations)
			if annotations[resiliencev1alpha1.AnnotationSidecar] == "true" {
				Expect(p.Spec.InitContainers).To(ContainElement(HaveField("Name", podinject.SidecarName)), "annotations %v: no sidecar", annotations)
			} else {
				tokenVolume(Default, p)
			}
		}

		// Opted in by the namespace's label: every compliant pod, wired.
		both := labelledNamespace("restricted-agent-", map[string]string{
			"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest",
			resiliencev1alpha1.LabelNodeAgent: resiliencev1alpha1.NodeAgentEnabled,
		})
		for _, annotations := range []map[string]string{nil, {resiliencev1alpha1.AnnotationSidecar: "true"}} {
			p := restrictedPod(both, annotations)
			Expect(k8sClient.Create(ctx, p)).To(Succeed(), "annotations %v", annotations)
			tokenVolume(Default, p)
		}
	})
})
