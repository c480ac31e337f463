package cluster

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// asToken is a client that authenticates with bearer alone, as a pod does.
func asToken(bearer string) client.Client {
	GinkgoHelper()
	cfg := rest.AnonymousClientConfig(adminConfig)
	cfg.BearerToken = bearer
	cl, err := client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	return cl
}

// touch labels the pod's report as the holder of the client's token.
func touch(ctx context.Context, cl client.Client, pod *corev1.Pod, by string) error {
	var rep resiliencev1alpha1.BreakerReport
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(pod), &rep); err != nil {
		return err
	}
	patch := client.MergeFrom(rep.DeepCopy())
	if rep.Labels == nil {
		rep.Labels = map[string]string{}
	}
	rep.Labels["e2e.fusebox.dev/touched-by"] = by
	return cl.Patch(ctx, &rep, patch)
}

func identitySpecs() {
	It("lets a token bound to one pod write that pod's report and no other's", func(ctx SpecContext) {
		ps := pods(ctx, exampleNamespace, appLabels(volumeApp))
		Expect(ps).To(HaveLen(3))
		self, other := &ps[0], &ps[1]
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: exampleNamespace, Name: self.Spec.ServiceAccountName}}
		// What the kubelet projects into the pod: a token of its service account, bound
		// to the Pod (name and UID).
		asPod := asToken(token(ctx, sa, self))

		err := touch(ctx, asPod, other, self.Name)
		Expect(err).To(HaveOccurred(), "pod %s's token wrote pod %s's report", self.Name, other.Name)
		Expect(isForbidden(err)).To(BeTrue(), "refused, but not as forbidden: %v", err)
		Expect(err.Error()).To(ContainSubstring("may write only the BreakerReport named " + self.Name))

		// Nor create a report under another name, owned by another pod.
		forged := &resiliencev1alpha1.BreakerReport{ObjectMeta: metav1.ObjectMeta{
			Namespace: exampleNamespace, Name: other.Name + "-forged",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: other.Name, UID: other.UID}},
		}}
		err = asPod.Create(ctx, forged)
		Expect(isForbidden(err)).To(BeTrue(), "pod %s's token created a report for %s: %v", self.Name, other.Name, err)

		Expect(touch(ctx, asPod, self, self.Name)).To(Succeed(), "pod %s's token could not write its own report", self.Name)
	}, SpecTimeout(time.Minute))

	It("removes a deleted pod's report by the garbage collector, with no operator running", func(ctx SpecContext) {
		// A pod of the example's own template, outside the Deployment (whose ReplicaSet
		// would replace it), so the Deployment's pods stay as they are.
		var deploy appsv1.Deployment
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: exampleNamespace, Name: volumeApp}, &deploy)).To(Succeed())
		witness := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: exampleNamespace, Name: "gc-witness",
				Labels:      map[string]string{"app.kubernetes.io/name": "gc-witness"},
				Annotations: deploy.Spec.Template.Annotations,
			},
			Spec: *deploy.Spec.Template.Spec.DeepCopy(),
		}
		witness.Spec.TerminationGracePeriodSeconds = ptrInt64(5)
		Expect(k8s.Create(ctx, witness)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(witness), witness)).To(Succeed())
			g.Expect(running(witness)).To(BeTrue())
		}).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Succeed())
		expectReports(ctx, []corev1.Pod{*witness}, exampleBreakerNow(ctx).Generation)

		// The operator prunes the reports of pods that are gone; with no manager pod at
		// all, only the garbage collector can remove this one.
		scaleManagers(ctx, 0)
		// Back to one replica whatever happens here, for the specs after this one.
		DeferCleanup(func(ctx SpecContext) { scaleManagers(ctx, 1) })
		Eventually(func(g Gomega) {
			var list corev1.PodList
			g.Expect(k8s.List(ctx, &list, client.InNamespace(operatorNamespace), managerLabels)).To(Succeed())
			g.Expect(list.Items).To(BeEmpty())
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed(), "the manager pods did not go")

		start := time.Now()
		Expect(k8s.Delete(ctx, witness)).To(Succeed())
		var podGone time.Duration
		Eventually(func(g Gomega) {
			err := k8s.Get(ctx, client.ObjectKeyFromObject(witness), &corev1.Pod{})
			if podGone == 0 && apierrors.IsNotFound(err) {
				podGone = time.Since(start)
			}
			err = k8s.Get(ctx, client.ObjectKeyFromObject(witness), &resiliencev1alpha1.BreakerReport{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the report is still there (%v)", err)
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(100 * time.Millisecond).Should(Succeed())
		gone := time.Since(start)
		var list corev1.PodList
		Expect(k8s.List(ctx, &list, client.InNamespace(operatorNamespace), managerLabels)).To(Succeed())
		Expect(list.Items).To(BeEmpty(), "a manager pod ran while the report went")
		record("pod deleted → its report deleted by the GC", gone, "pod gone after "+podGone.Round(100*time.Millisecond).String()+" (5 s grace period)")

		up := time.Now()
		scaleManagers(ctx, 1)
		waitManagers(ctx, 1, *image, 3*time.Minute)
		record("operator scaled 0 → 1 → manager Ready", time.Since(up), "")
		waitWebhooks(ctx)
		record("operator scaled 0 → 1 → webhooks answer through the Service", time.Since(up), "Ready, then the EndpointSlice and kube-proxy's rules")
	}, SpecTimeout(8*time.Minute))
}

func ptrInt64(n int64) *int64 { return &n }

// waitWebhooks waits until the API server reaches the CircuitBreaker webhooks through
// their Service: a pod that is Ready is not in the Service's endpoints, and kube-proxy's
// rules, at the same instant, and a write meanwhile is refused (the webhook fails closed).
// A server-side dry run goes through every admission webhook and stores nothing.
func waitWebhooks(ctx context.Context) {
	GinkgoHelper()
	Eventually(func() error {
		cb := &resiliencev1alpha1.CircuitBreaker{}
		cb.Namespace, cb.Name = exampleNamespace, exampleBreaker
		return k8s.Patch(ctx, cb, client.RawPatch(types.MergePatchType, []byte(`{}`)), client.DryRunAll)
	}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(100*time.Millisecond).Should(Succeed(), "the webhooks do not answer through their Service")
}

// scaleManagers is `kubectl scale deployment fusebox-controller-manager --replicas=n`.
func scaleManagers(ctx context.Context, n int32) {
	GinkgoHelper()
	scale, err := clientset.AppsV1().Deployments(operatorNamespace).GetScale(ctx, managerDeployment, metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred())
	scale.Spec.Replicas = n
	_, err = clientset.AppsV1().Deployments(operatorNamespace).UpdateScale(ctx, managerDeployment, scale, metav1.UpdateOptions{})
	Expect(err).NotTo(HaveOccurred())
}
