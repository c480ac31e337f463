package controller

import (
	"context"
	"encoding/json"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/kube"
)

// Helpers of the envtest specs that write pods' reports and read what the operator made of them.

// ensurePod returns the pod of that name, created first if it does not exist. envtest runs
// no kubelet, so the pod only exists (phase Pending, or what a spec sets), which is all the
// controller reads of it.
func ensurePod(ctx context.Context, ns, name string) *corev1.Pod {
	pod := &corev1.Pod{}
	err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, pod)
	if err == nil {
		return pod
	}
	Expect(apierrors.IsNotFound(err)).To(BeTrue(), "get pod %s: %v", name, err)
	pod = &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	Expect(k8sClient.Create(ctx, pod)).To(Succeed())
	return pod
}

// reports makes pod report entries, its whole report, as its agent does (pkg/breaker/kube):
// one server-side apply of the BreakerReport named after the pod, owned by the Pod, field
// manager fusebox-pod. The Pod is created first if it is missing.
func reports(ctx context.Context, ns, pod string, entries ...breakerconfig.ReportEntry) {
	p := ensurePod(ctx, ns, pod)
	Expect(applyReport(ctx, ns, pod, p.UID, entries...)).To(Succeed())
}

// applyReport writes the report of the pod of that name and UID, entries spelled by the
// wire type the agent writes (milliseconds included).
func applyReport(ctx context.Context, ns, pod string, uid types.UID, entries ...breakerconfig.ReportEntry) error {
	raw, err := json.Marshal(entries)
	if err != nil {
		return err
	}
	var breakers []any
	if err := json.Unmarshal(raw, &breakers); err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": resiliencev1alpha1.GroupVersion.String(),
		"kind":       breakerconfig.ReportKind,
		"metadata": map[string]any{
			"name": pod, "namespace": ns,
			"ownerReferences": []any{map[string]any{"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": string(uid)}},
		},
		"breakers": breakers,
	}}
	return k8sClient.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(kube.FieldManager), client.ForceOwnership)
}

// entry is one breaker's line in a report.
func entry(breaker, state, reason string, since time.Time, generation int64) breakerconfig.ReportEntry {
	return breakerconfig.ReportEntry{Name: breaker, State: state, Since: breakerconfig.NewTime(since), Reason: reason, ConfigGeneration: generation}
}

// setPhase sets a pod's phase through its status, as a kubelet would.
func setPhase(ctx context.Context, ns, name string, phase corev1.PodPhase) {
	pod := ensurePod(ctx, ns, name)
	pod.Status.Phase = phase
	Expect(k8sClient.Status().Update(ctx, pod)).To(Succeed())
}

func getBreaker(g Gomega, ctx context.Context, ns, name string) *resiliencev1alpha1.CircuitBreaker {
	var cb resiliencev1alpha1.CircuitBreaker
	g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &cb)).To(Succeed())
	return &cb
}

func condition(cb *resiliencev1alpha1.CircuitBreaker, t string) metav1.Condition {
	if c := meta.FindStatusCondition(cb.Status.Conditions, t); c != nil {
		return *c
	}
	return metav1.Condition{}
}

func eventNotes(ctx context.Context, ns, name, reason string) []string {
	var notes []string
	for _, e := range eventsFor(ctx, ns, name, reason) {
		notes = append(notes, e.Note)
	}
	return notes
}

func listedPods(cb *resiliencev1alpha1.CircuitBreaker) []string {
	var pods []string
	for _, m := range cb.Status.Members {
		pods = append(pods, m.Pod)
	}
	return pods
}

func reportExists(ctx context.Context, ns, name string) bool {
	err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &resiliencev1alpha1.BreakerReport{})
	if apierrors.IsNotFound(err) {
		return false
	}
	Expect(err).NotTo(HaveOccurred())
	return true
}

// deletePod deletes a pod at once; envtest has no kubelet to wait for.
func deletePod(ctx context.Context, ns, name string) {
	Expect(k8sClient.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, client.GracePeriodSeconds(0))).To(Succeed())
	Eventually(func() error {
		return k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &corev1.Pod{})
	}).Should(Satisfy(apierrors.IsNotFound))
}
