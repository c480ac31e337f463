package controller

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/gate"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// podOfRevision creates a pod labelled as a ReplicaSet of that revision labels its pods.
func podOfRevision(ctx context.Context, ns, name, label, revision string) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "checkout", label: revision}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	Expect(k8sClient.Create(ctx, pod)).To(Succeed())
}

// trippedEntry is an Open entry the pod reached on its own calls.
func trippedEntry(breaker string, since time.Time, generation int64) breakerconfig.ReportEntry {
	e := entry(breaker, breakerconfig.StateOpen, breakerconfig.ReasonTripped, since, generation)
	e.Calls, e.FailureRatePercent, e.Trigger = ptr.To[int64](40), ptr.To[int32](80), breakerconfig.TriggerFailureRate
	return e
}

func revisionNames(cb *resiliencev1alpha1.CircuitBreaker) []string {
	var out []string
	for _, r := range cb.Status.Revisions {
		out = append(out, fmt.Sprintf("%s:%d", r.Revision, r.Pods))
	}
	return out
}

var _ = Describe("Per-revision status (issue 31)", func() {
	var ns string
	BeforeEach(func(ctx SpecContext) { ns = newNamespace(ctx) })

	It("takes each pod's revision from the Pod, never from what its report claims", func(ctx SpecContext) {
		Expect(k8sClient.Create(ctx, newBreaker(ns, "payments"))).To(Succeed())
		now := time.Now()
		podOfRevision(ctx, ns, "stable-1", resiliencev1alpha1.LabelPodTemplateHash, "stable")
		podOfRevision(ctx, ns, "stable-2", resiliencev1alpha1.LabelPodTemplateHash, "stable")
		podOfRevision(ctx, ns, "canary-1", resiliencev1alpha1.LabelRolloutsPodTemplateHash, "canary")
		reports(ctx, ns, "stable-1", entry("payments", breakerconfig.StateClosed, breakerconfig.ReasonStarted, now, 1))
		reports(ctx, ns, "stable-2", entry("payments", breakerconfig.StateClosed, breakerconfig.ReasonStarted, now, 1))
		// The canary's pod fails, and its report, whose labels are the pod's to write,
		// claims the stable revision: the claim changes nothing.
		reports(ctx, ns, "canary-1", trippedEntry("payments", now, 1))
		var rep resiliencev1alpha1.BreakerReport
		Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "canary-1"}, &rep)).To(Succeed())
		rep.Labels = map[string]string{
			resiliencev1alpha1.LabelPodTemplateHash: "stable", resiliencev1alpha1.LabelRolloutsPodTemplateHash: "stable",
			resiliencev1alpha1.LabelControllerRevisionHash: "stable",
		}
		Expect(k8sClient.Update(ctx, &rep)).To(Succeed())
		// A pod of no workload reports too, and is in no revision.
		reports(ctx, ns, "bare", trippedEntry("payments", now, 1))

		Eventually(func(g Gomega) {
			cb := getBreaker(g, ctx, ns, "payments")
			g.Expect(cb.Status.MemberCounts).NotTo(BeNil())
			g.Expect(cb.Status.MemberCounts.Reporting).To(BeEquivalentTo(4))
			g.Expect(cb.Status.Revisions).To(HaveLen(2), "%v", revisionNames(cb))
			g.Expect(cb.Status.Revisions[0]).To(Equal(resiliencev1alpha1.RevisionStatus{
				Revision: "stable", Pods: 2, State: resiliencev1alpha1.StateClosed, Open: 0}))
			g.Expect(cb.Status.Revisions[1]).To(Equal(resiliencev1alpha1.RevisionStatus{
				Revision: "canary", Pods: 1, State: resiliencev1alpha1.StateOpen, Open: 1, FailureRatePercent: ptr.To[int32](80)}))
			j, err := gate.Judge(cb, "canary", "")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(j.Phase).To(Equal(gate.PhaseFailed), j.Reason)
		}).Should(Succeed())

		By("a pod relabelled to another revision moves with its labels, and its report says nothing new")
		var pod corev1.Pod
		Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "stable-2"}, &pod)).To(Succeed())
		pod.Labels[resiliencev1alpha1.LabelPodTemplateHash] = "canary"
		Expect(k8sClient.Update(ctx, &pod)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(revisionNames(getBreaker(g, ctx, ns, "payments"))).To(Equal([]string{"canary:2", "stable:1"}))
		}).Should(Succeed())
	})

	It("lists at most 10 revisions, most pods first, then by name", func(ctx SpecContext) {
		Expect(k8sClient.Create(ctx, newBreaker(ns, "payments"))).To(Succeed())
		now := time.Now()
		// Twelve revisions: r00 has 3 pods, r01 1, r02 2, r03 3, ...
		var want []string
		for r := range 12 {
			for p := range r%3 + 1 {
				name := fmt.Sprintf("r%02d-%d", r, p)
				podOfRevision(ctx, ns, name, resiliencev1alpha1.LabelPodTemplateHash, fmt.Sprintf("r%02d", r))
				reports(ctx, ns, name, entry("payments", breakerconfig.StateClosed, breakerconfig.ReasonStarted, now, 1))
			}
		}
		for _, pods := range []int{3, 2, 1} {
			for r := range 12 {
				if r%3+1 == pods {
					want = append(want, fmt.Sprintf("r%02d:%d", r, pods))
				}
			}
		}
		want = want[:resiliencev1alpha1.MaxRevisionsListed]
		Eventually(func(g Gomega) {
			cb := getBreaker(g, ctx, ns, "payments")
			g.Expect(cb.Status.MemberCounts).NotTo(BeNil())
			g.Expect(cb.Status.MemberCounts.Reporting).To(BeEquivalentTo(24))
			g.Expect(revisionNames(cb)).To(Equal(want))
		}).Should(Succeed())
	})

	It("judges the gate's table from what real reports add up to", func(ctx SpecContext) {
		throttled := func(s *resiliencev1alpha1.CircuitBreakerSpec) {
			s.Throttle = &resiliencev1alpha1.Throttle{K: ptr.To(2.0)}
			s.MinimumThroughput = ptr.To[int32](20)
		}
		fleet := func(s *resiliencev1alpha1.CircuitBreakerSpec) { s.Scope = resiliencev1alpha1.ScopeFleet }
		for _, b := range []*resiliencev1alpha1.CircuitBreaker{
			newBreaker(ns, "canary-fails"), newBreaker(ns, "outage"), newBreaker(ns, "healthy"),
			newBreaker(ns, "quiet", throttled), newBreaker(ns, "busy", throttled), newBreaker(ns, "adopted", fleet),
		} {
			Expect(k8sClient.Create(ctx, b)).To(Succeed())
		}
		now := time.Now()
		closed := func(name string) breakerconfig.ReportEntry {
			return entry(name, breakerconfig.StateClosed, breakerconfig.ReasonStarted, now, 1)
		}
		window := func(name string, requests, accepts int64) breakerconfig.ReportEntry {
			return withTraffic(closed(name), requests, accepts, 0, 0)
		}
		adoptedOpen := entry("adopted", breakerconfig.StateOpen, breakerconfig.ReasonAdopted, now, 1)
		// Three stable pods, two of the canary, one of an older revision still running.
		for i := range 3 {
			name := fmt.Sprintf("stable-%d", i)
			podOfRevision(ctx, ns, name, resiliencev1alpha1.LabelPodTemplateHash, "stable")
			reports(ctx, ns, name, closed("canary-fails"), trippedEntry("outage", now, 1), closed("healthy"),
				window("quiet", 100, 100), window("busy", 100, 100), adoptedOpen)
		}
		for i := range 2 {
			name := fmt.Sprintf("canary-%d", i)
			podOfRevision(ctx, ns, name, resiliencev1alpha1.LabelPodTemplateHash, "canary")
			reports(ctx, ns, name, trippedEntry("canary-fails", now, 1), trippedEntry("outage", now, 1), closed("healthy"),
				window("quiet", 4, 4), window("busy", 30, 30), trippedEntry("adopted", now, 1))
		}
		podOfRevision(ctx, ns, "older-0", resiliencev1alpha1.LabelPodTemplateHash, "older")
		reports(ctx, ns, "older-0", trippedEntry("canary-fails", now, 1), closed("outage"), closed("healthy"),
			window("quiet", 100, 100), window("busy", 100, 100), adoptedOpen)

		for _, tc := range []struct {
			breaker, baseline string
			phase             gate.Phase
			wantBaseline      string
		}{
			{"canary-fails", "", gate.PhaseFailed, "stable"}, // only the canary's pods open
			{"outage", "", gate.PhaseInconclusive, "stable"}, // every revision's pods open
			{"outage", "older", gate.PhaseFailed, "older"},   // a baseline named that is not open
			{"quiet", "", gate.PhaseInconclusive, "stable"},  // 8 calls, minimumThroughput 20
			{"busy", "", gate.PhaseSuccessful, "stable"},     // 60 calls, all fine
			{"healthy", "", gate.PhaseSuccessful, "stable"},  // closed, no traffic reported
			{"canary-fails", "older", gate.PhaseInconclusive, "older"},
			{"adopted", "", gate.PhaseFailed, "stable"}, // the stable pods' Opens are the fleet's, not theirs
		} {
			Eventually(func(g Gomega) {
				cb := getBreaker(g, ctx, ns, tc.breaker)
				g.Expect(cb.Status.MemberCounts).NotTo(BeNil())
				g.Expect(cb.Status.MemberCounts.Reporting).To(BeEquivalentTo(6), tc.breaker)
				j, err := gate.Judge(cb, "canary", tc.baseline)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(j.Phase).To(Equal(tc.phase), "%s against %q: %s", tc.breaker, tc.baseline, j.Reason)
				g.Expect(j.Baseline).NotTo(BeNil())
				g.Expect(j.Baseline.Revision).To(Equal(tc.wantBaseline))
			}).Should(Succeed())
		}
		cb := &resiliencev1alpha1.CircuitBreaker{}
		Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "quiet"}, cb)).To(Succeed())
		Expect(cb.Status.Revisions[1].Calls).To(HaveValue(BeEquivalentTo(8)))
		Expect(cb.Status.Revisions[1].FailureRatePercent).To(HaveValue(BeEquivalentTo(0)))
	})

	It("drops a revision once its last pod ends", func(ctx SpecContext) {
		Expect(k8sClient.Create(ctx, newBreaker(ns, "payments"))).To(Succeed())
		now := time.Now()
		podOfRevision(ctx, ns, "old-0", resiliencev1alpha1.LabelControllerRevisionHash, "old")
		podOfRevision(ctx, ns, "new-0", resiliencev1alpha1.LabelControllerRevisionHash, "new")
		reports(ctx, ns, "old-0", entry("payments", breakerconfig.StateClosed, breakerconfig.ReasonStarted, now, 1))
		reports(ctx, ns, "new-0", entry("payments", breakerconfig.StateClosed, breakerconfig.ReasonStarted, now, 1))
		Eventually(func(g Gomega) {
			g.Expect(revisionNames(getBreaker(g, ctx, ns, "payments"))).To(ConsistOf("old:1", "new:1"))
		}).Should(Succeed())
		setPhase(ctx, ns, "old-0", corev1.PodSucceeded)
		Eventually(func(g Gomega) {
			g.Expect(revisionNames(getBreaker(g, ctx, ns, "payments"))).To(Equal([]string{"new:1"}))
		}).Should(Succeed())
		Expect(apierrors.IsNotFound(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "gone"}, &corev1.Pod{}))).To(BeTrue())
	})
})
