package webhook_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/testutil"
	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/kube"
	"github.com/fusebox-dev/fusebox/pkg/webhook/podinject"
)

func pod(ns string, annotations map[string]string, containers ...corev1.Container) *corev1.Pod {
	if len(containers) == 0 {
		containers = []corev1.Container{{Name: "app", Image: "app"}}
	}
	// With a service account, as the API server's ServiceAccount admission names one
	// (envtest turns that plugin off; a projected token needs one).
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "pod-", Namespace: ns, Annotations: annotations},
		Spec:       corev1.PodSpec{ServiceAccountName: "default", Containers: containers},
	}
}

var inject = map[string]string{resiliencev1alpha1.AnnotationInject: "true"}

// injected says whether the container got the mount and all three variables.
func injected(c corev1.Container) bool {
	mounted := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == podinject.VolumeName && m.MountPath == podinject.MountPath && m.ReadOnly
	})
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil:
			env[e.Name] = "fieldRef:" + e.ValueFrom.FieldRef.FieldPath
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		}
	}
	return mounted && env[breakerconfig.EnvConfigDir] == podinject.MountPath &&
		env[breakerconfig.EnvPodName] == "fieldRef:metadata.name" && env[breakerconfig.EnvNamespace] == "fieldRef:metadata.namespace"
}

func hasVolume(p *corev1.Pod) bool {
	return slices.ContainsFunc(p.Spec.Volumes, func(v corev1.Volume) bool {
		return v.Name == podinject.VolumeName && v.ConfigMap != nil && v.ConfigMap.Name == breakerconfig.ConfigMapName &&
			v.ConfigMap.Optional != nil && *v.ConfigMap.Optional
	})
}

// readmit admits p again: a server-side dry-run create of the same pod under
// another name, as the API server would admit a re-created pod. It returns what
// admission made of it, and the warnings.
func readmit(cl client.Client, w *testutil.Warnings, p *corev1.Pod) (*corev1.Pod, []string) {
	GinkgoHelper()
	again := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name + "-again", Namespace: p.Namespace, Annotations: p.Annotations},
		Spec:       *p.Spec.DeepCopy(),
	}
	Expect(cl.Create(context.Background(), again, client.DryRunAll)).To(Succeed())
	return again, w.Take()
}

// sameSpec says whether admission left the pod's spec as it was.
func sameSpec(a, b *corev1.Pod) bool {
	return equality.Semantic.DeepEqual(a.Spec.Volumes, b.Spec.Volumes) &&
		equality.Semantic.DeepEqual(a.Spec.Containers, b.Spec.Containers) &&
		equality.Semantic.DeepEqual(a.Spec.InitContainers, b.Spec.InitContainers)
}

var _ = Describe("Pod injection", func() {
	var (
		ctx = context.Background()
		ns  string
	)
	BeforeEach(func() { ns = newNamespace() })

	It("gives an annotated pod the config volume and environment, and re-admission changes nothing", func() {
		cl, w := warningClient()
		always := corev1.ContainerRestartPolicyAlways
		p := pod(ns, inject, corev1.Container{Name: "app", Image: "app"}, corev1.Container{Name: "proxy", Image: "proxy"})
		p.Spec.InitContainers = []corev1.Container{
			{Name: "migrate", Image: "migrate"},
			{Name: "sidecar", Image: "sidecar", RestartPolicy: &always},
		}
		Expect(cl.Create(ctx, p)).To(Succeed())
		Expect(w.Take()).To(BeEmpty())
		Expect(hasVolume(p)).To(BeTrue(), "volumes %+v", p.Spec.Volumes)
		Expect(injected(p.Spec.Containers[0])).To(BeTrue(), "app %+v", p.Spec.Containers[0])
		Expect(injected(p.Spec.Containers[1])).To(BeTrue(), "proxy %+v", p.Spec.Containers[1])
		Expect(injected(p.Spec.InitContainers[1])).To(BeTrue(), "sidecar %+v", p.Spec.InitContainers[1])
		Expect(p.Spec.InitContainers[0].Env).To(BeEmpty(), "a plain init container is left alone")

		cur := p
		for range 2 {
			again, warns := readmit(cl, w, cur)
			Expect(warns).To(BeEmpty())
			Expect(sameSpec(again, cur)).To(BeTrue(), "re-admission changed the pod:\n%+v\n%+v", cur.Spec, again.Spec)
			cur = again
		}

		// An update (pods' volumes and env cannot change anyway) changes nothing either.
		patch := client.MergeFrom(p.DeepCopy())
		p.Labels = map[string]string{"touched": "yes"}
		before := p.DeepCopy()
		Expect(cl.Patch(ctx, p, patch)).To(Succeed())
		Expect(w.Take()).To(BeEmpty())
		Expect(sameSpec(p, before)).To(BeTrue())
	})

	It("leaves a pod without the annotation alone", func() {
		p := pod(ns, nil)
		Expect(k8sClient.Create(ctx, p)).To(Succeed())
		Expect(p.Spec.Volumes).To(BeEmpty())
		Expect(p.Spec.Containers[0].Env).To(BeEmpty())
		Expect(p.Spec.Containers[0].VolumeMounts).To(BeEmpty())
	})

	It("warns about an annotation value other than true", func() {
		cl, w := warningClient()
		p := pod(ns, map[string]string{resiliencev1alpha1.AnnotationInject: "yes"})
		Expect(cl.Create(ctx, p)).To(Succeed())
		Expect(w.Take()).To(Equal([]string{`fusebox: annotation fusebox.dev/inject is "yes"; only "true" injects the breaker configuration, so nothing was injected`}))
		Expect(p.Spec.Volumes).To(BeEmpty())
	})

	It("keeps the pod's own volume, mount and environment of the same names, and says so", func() {
		cl, w := warningClient()
		p := pod(ns, inject,
			corev1.Container{Name: "app", Image: "app", Env: []corev1.EnvVar{{Name: "POD_NAME", Value: "fixed"}}},
			corev1.Container{Name: "worker", Image: "worker", VolumeMounts: []corev1.VolumeMount{{Name: "scratch", MountPath: "/etc/fusebox"}}},
		)
		p.Spec.Volumes = []corev1.Volume{
			{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: podinject.VolumeName, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		}
		want := []string{
			`fusebox: kept the pod's own volume "fusebox-breakers", which is not the fusebox-breakers ConfigMap; it is what /etc/fusebox mounts`,
			`fusebox: container "app": kept its own environment variable POD_NAME`,
			`fusebox: container "worker": kept its own volume mount at /etc/fusebox (volume "scratch")`,
		}
		Expect(cl.Create(ctx, p)).To(Succeed())
		Expect(w.Take()).To(Equal(want))

		Expect(p.Spec.Volumes[1].EmptyDir).NotTo(BeNil(), "the pod's own volume was replaced")
		app, worker := p.Spec.Containers[0], p.Spec.Containers[1]
		Expect(app.Env[0]).To(Equal(corev1.EnvVar{Name: "POD_NAME", Value: "fixed"}))
		Expect(app.Env).To(HaveLen(4), "FUSEBOX_CONFIG_DIR, POD_NAMESPACE and POD_UID added, POD_NAME kept")
		Expect(app.VolumeMounts).To(ContainElement(corev1.VolumeMount{Name: podinject.VolumeName, MountPath: podinject.MountPath, ReadOnly: true}))
		Expect(worker.VolumeMounts).To(Equal([]corev1.VolumeMount{{Name: "scratch", MountPath: "/etc/fusebox"}}))
		Expect(injected(worker)).To(BeFalse())
		Expect(worker.Env).To(HaveLen(4))

		cur := p
		for range 2 {
			again, warns := readmit(cl, w, cur)
			Expect(warns).To(Equal(want))
			Expect(sameSpec(again, cur)).To(BeTrue(), "re-admission changed the pod")
			cur = again
		}
	})

	It("does not inject in the system namespaces or the operator's own", func() {
		Expect(client.IgnoreAlreadyExists(k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fusebox-system"}}))).To(Succeed())
		for _, system := range []string{"kube-system", "fusebox-system"} {
			p := pod(system, inject)
			Expect(k8sClient.Create(ctx, p)).To(Succeed())
			DeferCleanup(func() { _ = k8sClient.Delete(ctx, p) })
			Expect(p.Spec.Volumes).To(BeEmpty(), "pod in %s", system)
		}
		labelled := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "webhook-off-", Labels: map[string]string{resiliencev1alpha1.LabelInjection: "disabled"}}}
		Expect(k8sClient.Create(ctx, labelled)).To(Succeed())
		DeferCleanup(func() { _ = k8sClient.Delete(ctx, labelled) })
		p := pod(labelled.Name, inject)
		Expect(k8sClient.Create(ctx, p)).To(Succeed())
		Expect(p.Spec.Volumes).To(BeEmpty(), "pod in a namespace labelled fusebox.dev/injection=disabled")
	})

	// The generated pod webhook, pointed at a port where nothing listens. With
	// failurePolicy Fail (the control) pod creation fails, which proves the API
	// server calls it; as generated (Ignore), pods are created.
	It("never blocks pod creation when the webhook is down", func() {
		var generated *admissionregistrationv1.MutatingWebhook
		for _, cfg := range testEnv.WebhookInstallOptions.MutatingWebhooks {
			for i := range cfg.Webhooks {
				if cfg.Webhooks[i].Name == "inject.pods.fusebox.dev" {
					generated = cfg.Webhooks[i].DeepCopy()
				}
			}
		}
		Expect(generated).NotTo(BeNil())
		Expect(*generated.FailurePolicy).To(Equal(admissionregistrationv1.Ignore))
		Expect(*generated.SideEffects).To(Equal(admissionregistrationv1.SideEffectClassNone))
		Expect(*generated.ReinvocationPolicy).To(Equal(admissionregistrationv1.NeverReinvocationPolicy))

		l, err := net.Listen("tcp", "127.0.0.1:0")
		Expect(err).NotTo(HaveOccurred())
		down := fmt.Sprintf("https://%s%s", l.Addr(), podinject.Path)
		Expect(l.Close()).To(Succeed())

		hook := generated.DeepCopy()
		hook.Name = "down.inject.pods.fusebox.dev"
		hook.ClientConfig.URL = &down
		hook.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}
		hook.FailurePolicy = ptr.To(admissionregistrationv1.Fail)
		cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: "fusebox-down-" + ns},
			Webhooks:   []admissionregistrationv1.MutatingWebhook{*hook},
		}
		Expect(k8sClient.Create(ctx, cfg)).To(Succeed())
		DeferCleanup(func() { _ = k8sClient.Delete(ctx, cfg) })

		Eventually(func() error { return k8sClient.Create(ctx, pod(ns, inject)) }).
			Should(MatchError(ContainSubstring("failed calling webhook \"down.inject.pods.fusebox.dev\"")), "control: with failurePolicy Fail, the dead webhook refuses pods")

		cfg.Webhooks[0].FailurePolicy = generated.FailurePolicy
		Expect(k8sClient.Update(ctx, cfg)).To(Succeed())
		Eventually(func() error { return k8sClient.Create(ctx, pod(ns, inject)) }).Should(Succeed())
		for range 3 {
			Expect(k8sClient.Create(ctx, pod(ns, inject))).To(Succeed())
			Expect(k8sClient.Create(ctx, pod(ns, nil))).To(Succeed())
		}
	})

	It("gives the pod all kube.FromEnvironment needs to run the published policy", func() {
		policy := breaker.Policy{OpenTimeout: time.Hour, Window: 10 * time.Second, FailureRatio: 0.5,
			MinimumThroughput: 2, SuccessThreshold: 1, HalfOpenPermittedCalls: 1, Mode: breaker.ModeEnforce,
			SlowCallRatio: 1} // what a config without slow-call judging reads as (DefaultPolicy's)
		doc, err := breakerconfig.Marshal(kube.ConfigOf("payments", 1, policy, breakerconfig.ScopePod))
		Expect(err).NotTo(HaveOccurred())
		Expect(k8sClient.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: breakerconfig.ConfigMapName, Namespace: ns},
			Data:       map[string]string{"payments.json": string(doc)},
		})).To(Succeed())

		p := pod(ns, inject)
		Expect(k8sClient.Create(ctx, p)).To(Succeed())
		root := GinkgoT().TempDir()
		for _, e := range kubeletEnv(ctx, p, p.Spec.Containers[0], root) {
			GinkgoT().Setenv(e.Name, e.Value)
		}
		// Not in a cluster: reporting stays off, whatever runs this test.
		GinkgoT().Setenv("KUBERNETES_SERVICE_HOST", "")

		agentCtx, stop := context.WithCancel(ctx)
		DeferCleanup(stop)
		reg, err := kube.FromEnvironment(agentCtx)
		Expect(err).NotTo(HaveOccurred())
		b := reg.Get("payments")
		Eventually(b.Policy).Should(Equal(policy), "the published policy, read from the mounted directory")

		failure := func(context.Context) error { return fmt.Errorf("dependency down") }
		Expect(b.Execute(ctx, failure)).To(MatchError("dependency down"))
		Expect(b.Execute(ctx, failure)).To(MatchError("dependency down"))
		Expect(b.Execute(ctx, failure)).To(MatchError(breaker.ErrOpen), "two failures in two calls open a circuit whose minimumThroughput is 2")
	})
})

// kubeletEnv plays the kubelet for container c of the stored pod p, with the
// file system rooted at root: it fills each ConfigMap volume c mounts, laid out
// as the kubelet lays it out (the keys are symlinks through ..data to a hidden
// timestamped directory), and returns c's environment as the container would
// see it, with paths under a mount re-rooted under root.
func kubeletEnv(ctx context.Context, p *corev1.Pod, c corev1.Container, root string) []corev1.EnvVar {
	GinkgoHelper()
	mounts := map[string]bool{}
	for _, m := range c.VolumeMounts {
		i := slices.IndexFunc(p.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
		Expect(i).NotTo(Equal(-1), "mount of volume %q the pod does not have", m.Name)
		v := p.Spec.Volumes[i]
		if v.ConfigMap == nil {
			continue
		}
		var cm corev1.ConfigMap
		err := k8sClient.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: v.ConfigMap.Name}, &cm)
		if apierrors.IsNotFound(err) && v.ConfigMap.Optional != nil && *v.ConfigMap.Optional {
			continue
		}
		Expect(err).NotTo(HaveOccurred())
		dir := filepath.Join(root, m.MountPath)
		version := filepath.Join(dir, "..2026_01_01_00_00_00.000000001")
		Expect(os.MkdirAll(version, 0o755)).To(Succeed())
		for key, value := range cm.Data {
			Expect(os.WriteFile(filepath.Join(version, key), []byte(value), 0o644)).To(Succeed())
			Expect(os.Symlink(filepath.Join("..data", key), filepath.Join(dir, key))).To(Succeed())
		}
		Expect(os.Symlink(filepath.Base(version), filepath.Join(dir, "..data"))).To(Succeed())
		mounts[m.MountPath] = true
	}
	var env []corev1.EnvVar
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil:
			switch e.ValueFrom.FieldRef.FieldPath {
			case "metadata.name":
				env = append(env, corev1.EnvVar{Name: e.Name, Value: p.Name})
			case "metadata.namespace":
				env = append(env, corev1.EnvVar{Name: e.Name, Value: p.Namespace})
			case "metadata.uid":
				env = append(env, corev1.EnvVar{Name: e.Name, Value: string(p.UID)})
			default:
				Fail("unexpected fieldRef " + e.ValueFrom.FieldRef.FieldPath)
			}
		case mounts[e.Value]:
			env = append(env, corev1.EnvVar{Name: e.Name, Value: filepath.Join(root, e.Value)})
		default:
			env = append(env, e)
		}
	}
	return env
}
