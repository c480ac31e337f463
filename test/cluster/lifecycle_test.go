package cluster

import (
	"context"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// The Lease the managers elect their leader with (cmd/manager).
const leaderLease = "fusebox-manager.fusebox.dev"

// leader is the manager pod holding the Lease: client-go's identity is the holder's
// hostname, the pod's name, then "_" and a UUID.
func leader(ctx context.Context) string {
	var lease coordinationv1.Lease
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: leaderLease}, &lease); err != nil || lease.Spec.HolderIdentity == nil {
		return ""
	}
	pod, _, _ := strings.Cut(*lease.Spec.HolderIdentity, "_")
	return pod
}

// openedEvents are the CircuitOpened Events of the example's breaker recorded since t.
func openedEvents(ctx context.Context, since time.Time) []eventsv1.Event {
	GinkgoHelper()
	var list eventsv1.EventList
	Expect(k8s.List(ctx, &list, client.InNamespace(exampleNamespace))).To(Succeed())
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Name == exampleBreaker && e.Reason == resiliencev1alpha1.EventCircuitOpened && !e.EventTime.Time.Before(since) {
			out = append(out, e)
		}
	}
	return out
}

func failoverSpecs() {
	It("hands leadership over when the leader's pod is deleted, and reports the next incident once", func(ctx SpecContext) {
		needKubectl()
		helmUpgrade(map[string]any{"replicas": 2})
		managers := waitManagers(ctx, 2, *image, 3*time.Minute)
		var old string
		Eventually(func() string { old = leader(ctx); return old }).WithContext(ctx).WithTimeout(time.Minute).
			Should(BeElementOf(names(managers)), "no manager pod holds the Lease")
		GinkgoWriter.Printf("managers %v, leader %s\n", names(managers), old)

		// The Deployment replaces the deleted pod at once, and the replacement may win the
		// Lease before the other replica's next try: any manager but the old one will do.
		start := time.Now()
		Expect(k8s.Delete(ctx, podNamed(operatorNamespace, old))).To(Succeed())
		var successor string
		Eventually(func() string { successor = leader(ctx); return successor }).WithContext(ctx).WithTimeout(90*time.Second).WithPolling(100*time.Millisecond).
			Should(And(Not(BeEmpty()), Not(Equal(old))), "nobody took the Lease over from %s", old)
		record("leader pod deleted → another manager holds the Lease", time.Since(start), "2 replicas; the old leader releases the Lease on shutdown")
		GinkgoWriter.Printf("new leader %s\n", successor)

		since := time.Now()
		incident(ctx)
		// The new leader alone recorded it, once: an Event per transition, none repeated
		// (a repeat of the same Event by one recorder would be a series).
		var events []eventsv1.Event
		Eventually(func() []eventsv1.Event { events = openedEvents(ctx, since.Add(-time.Second)); return events }).
			WithContext(ctx).WithTimeout(30 * time.Second).ShouldNot(BeEmpty())
		notes := map[string]bool{}
		for _, e := range events {
			GinkgoWriter.Printf("event %s from %s: %s (series %+v)\n", e.Name, e.ReportingInstance, e.Note, e.Series)
			Expect(e.ReportingInstance).To(ContainSubstring(successor), "an Event not from the new leader")
			Expect(e.Series).To(BeNil(), "a repeated Event: %s", e.Note)
			Expect(notes).NotTo(HaveKey(e.Note), "the same Event twice: %s", e.Note)
			notes[e.Note] = true
		}
	}, SpecTimeout(6*time.Minute))
}

func podNamed(namespace, name string) *corev1.Pod {
	p := &corev1.Pod{}
	p.Namespace, p.Name = namespace, name
	return p
}

func upgradeSpecs() {
	It("keeps the application running and calling through `helm upgrade` to a rebuilt image and `helm uninstall`", func(ctx SpecContext) {
		needKubectl()
		rebuilt := need("FUSEBOX_REBUILT_IMAGE (-rebuilt-image)", *rebuiltImage)
		before := allAppPods(ctx)
		Expect(before).To(HaveLen(5))
		lastGen := exampleBreakerNow(ctx).Generation

		// The upgrade rolls the managers onto the rebuilt image; the pods keep running, and
		// the breaker still opens and closes, judged by the new managers.
		start := time.Now()
		helmUpgrade(imageValues(rebuilt))
		waitManagers(ctx, 2, rebuilt, 4*time.Minute)
		record("helm upgrade → 2 managers Ready on the rebuilt image", time.Since(start), "rolling update")
		expectUntouched(ctx, before)
		expectCalling(ctx, before, start, "circuit closed, upstream up")
		incident(ctx)

		// Uninstalled: no manager, no webhook, no breaker-client role (reports can no
		// longer be written), and the CRDs stay, as Helm leaves them. Each pod's breaker
		// still runs the last config it got, and opens and closes on its own.
		start = time.Now()
		helmUninstall()
		Eventually(func(g Gomega) {
			var list corev1.PodList
			g.Expect(k8s.List(ctx, &list, client.InNamespace(operatorNamespace), managerLabels)).To(Succeed())
			g.Expect(list.Items).To(BeEmpty())
		}).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Succeed())
		expectUntouched(ctx, before)
		expectCalling(ctx, before, start, "circuit closed, upstream up")
		cb := exampleBreakerNow(ctx)
		Expect(cb.Generation).To(Equal(lastGen))
		for _, p := range before {
			log, err := podLog(ctx, &p, time.Time{})
			Expect(err).NotTo(HaveOccurred())
			Expect(lastLine(log, "policy of "+exampleBreaker)).To(ContainSubstring("of at least %d calls", *cb.Spec.MinimumThroughput),
				"pod %s does not run the last config", p.Name)
		}
		down := time.Now()
		setUpstream(ctx, before, "down")
		expectCalling(ctx, before, down, "circuit open, upstream down")
		up := time.Now()
		setUpstream(ctx, before, "up")
		expectCalling(ctx, before, up, "circuit closed, upstream up")
		expectUntouched(ctx, before)
	}, SpecTimeout(10*time.Minute))
}

// expectUntouched checks that the pods are the same pods, never restarted, all running.
func expectUntouched(ctx context.Context, before []corev1.Pod) {
	GinkgoHelper()
	for _, was := range before {
		var now corev1.Pod
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(&was), &now)).To(Succeed(), "pod %s is gone", was.Name)
		Expect(now.UID).To(Equal(was.UID), "pod %s was replaced", was.Name)
		Expect(running(&now)).To(BeTrue(), "pod %s is not running", was.Name)
		Expect(restarts(&now)).To(Equal(restarts(&was)), "pod %s restarted", was.Name)
	}
}

// expectCalling waits until every pod has logged, since t, a second of calls that
// begins with want ("circuit open, upstream down", say), as `kubectl logs` shows it.
func expectCalling(ctx context.Context, ps []corev1.Pod, since time.Time, want string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		for _, p := range ps {
			log, err := podLog(ctx, &p, since)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(log).To(ContainSubstring(want), "pod %s since %s", p.Name, since.Format(time.TimeOnly))
		}
	}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
}
