package webhook_test

import (
	"context"
	"slices"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	"github.com/fusebox-dev/fusebox/pkg/webhook/podinject"
)

// sidecarImage is the suite manager's --fuseboxd-image, not the default.
const sidecarImage = "registry.example.com/platform/fuseboxd:v1.2.3"

var _ = Describe("Sidecar injection", func() {
	It("gives a pod annotated fusebox.dev/sidecar the fuseboxd native sidecar and its socket in every container", func() {
		ns := newNamespace()
		cl, w := warningClient()
		p := pod(ns, map[string]string{podinject.SidecarAnnotation: "true"},
			corev1.Container{Name: "php-fpm", Image: "php"}, corev1.Container{Name: "nginx", Image: "nginx"})
		Expect(cl.Create(context.Background(), p)).To(Succeed())
		Expect(w.Take()).To(BeEmpty())

		Expect(p.Spec.InitContainers).To(HaveLen(1))
		sc := p.Spec.InitContainers[0]
		Expect(sc.Name).To(Equal(podinject.SidecarName))
		Expect(sc.Image).To(Equal(sidecarImage), "the manager's --fuseboxd-image")
		Expect(sc.RestartPolicy).NotTo(BeNil())
		Expect(*sc.RestartPolicy).To(Equal(corev1.ContainerRestartPolicyAlways))
		Expect(injected(sc)).To(BeTrue(), "the sidecar gets the config and the pod's identity: %+v", sc)
		Expect(sc.Resources.Requests.Memory().String()).To(Equal("32Mi"))
		socket := func(c corev1.Container) bool {
			return slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
				return m.Name == podinject.SocketVolumeName && m.MountPath == podinject.SocketDir
			})
		}
		for _, c := range append([]corev1.Container{sc}, p.Spec.Containers...) {
			Expect(socket(c)).To(BeTrue(), "%s mounts the socket's directory: %+v", c.Name, c.VolumeMounts)
		}
		Expect(injected(p.Spec.Containers[0])).To(BeFalse(), "without fusebox.dev/inject the application gets only the socket")
		Expect(slices.ContainsFunc(p.Spec.Volumes, func(v corev1.Volume) bool {
			return v.Name == podinject.SocketVolumeName && v.EmptyDir != nil
		})).To(BeTrue(), "volumes %+v", p.Spec.Volumes)

		again, warns := readmit(cl, w, p)
		Expect(warns).To(BeEmpty())
		Expect(sameSpec(again, p)).To(BeTrue(), "re-admission changed the pod:\n%+v\n%+v", p.Spec, again.Spec)
	})

	It("refuses a pod with its own container named fuseboxd, naming the fix, and leaves its own fuseboxd sidecar alone", func() {
		ns := newNamespace()
		p := pod(ns, map[string]string{podinject.SidecarAnnotation: "true"}, corev1.Container{Name: podinject.SidecarName, Image: "mine"})
		err := k8sClient.Create(context.Background(), p)
		Expect(err).To(MatchError(And(
			ContainSubstring(`admission webhook "inject.pods.fusebox.dev" denied the request`),
			ContainSubstring(`the pod has a container named "fuseboxd"`),
			ContainSubstring("rename that container, or remove the annotation"))))
		Expect(err).NotTo(MatchError(ContainSubstring("Duplicate value")))

		always := corev1.ContainerRestartPolicyAlways
		own := pod(ns, map[string]string{podinject.SidecarAnnotation: "true"})
		own.Spec.InitContainers = []corev1.Container{{Name: podinject.SidecarName, Image: "mine", RestartPolicy: &always}}
		Expect(k8sClient.Create(context.Background(), own)).To(Succeed())
		Expect(own.Spec.InitContainers).To(HaveLen(1))
		Expect(own.Spec.InitContainers[0].Image).To(Equal("mine"))
	})
})
