package controller

import (
	"context"
	"fmt"
	"math"
	"os"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/counting"
)

// asPod is a client acting as the pod of that name, created first if missing, as the API
// server authenticates a token of service account "app" mounted in it: the extras of a
// pod-bound token, and config/rbac's breaker-client role bound to the account. The
// admission policies of config/policy are installed (suite_test.go): what it writes is
// what a pod could write under its own identity.
func asPod(ctx context.Context, ns, name string) client.Client {
	c, err := podClient(ctx, k8sClient, cfg, ns, ensurePod(ctx, ns, name))
	Expect(err).NotTo(HaveOccurred())
	return c
}

// podClient is asPod for admin, the client that sets the identity up, and admin's config.
func podClient(ctx context.Context, admin client.Client, adminConfig *rest.Config, ns string, pod *corev1.Pod) (client.Client, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}}
	err := admin.Create(ctx, sa)
	switch {
	case apierrors.IsAlreadyExists(err):
	case err != nil:
		return nil, err
	default:
		raw, err := os.ReadFile("../../config/rbac/breaker_client_role.yaml")
		if err != nil {
			return nil, err
		}
		var role rbacv1.ClusterRole
		if err := yaml.Unmarshal(raw, &role); err != nil {
			return nil, err
		}
		role.Name = "fusebox-breaker-client-" + ns // cluster-scoped: one per namespace
		if err := admin.Create(ctx, &role); err != nil {
			return nil, err
		}
		if err := admin.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app-breaker-client"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "app"}},
		}); err != nil {
			return nil, err
		}
	}
	c := rest.CopyConfig(adminConfig)
	c.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + ns + ":app",
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
		Extra: map[string][]string{
			"authentication.kubernetes.io/pod-name": {pod.Name},
			"authentication.kubernetes.io/pod-uid":  {string(pod.UID)},
		},
	}
	return client.New(c, client.Options{Scheme: scheme})
}

// ownReport is the report a pod writes of itself: named after it, owned by it.
func ownReport(ctx context.Context, ns, pod string, entries ...resiliencev1alpha1.BreakerReportEntry) *resiliencev1alpha1.BreakerReport {
	p := ensurePod(ctx, ns, pod)
	return &resiliencev1alpha1.BreakerReport{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod, UID: p.UID}}},
		Breakers: entries,
	}
}

// writeOwn creates or replaces the pod's own report as that pod; the admission policy
// takes a moment to be enforced after the suite installs it, so a refusal is retried.
func writeOwn(ctx context.Context, as client.Client, rep *resiliencev1alpha1.BreakerReport) error {
	var current resiliencev1alpha1.BreakerReport
	err := as.Get(ctx, client.ObjectKeyFromObject(rep), &current)
	switch {
	case apierrors.IsNotFound(err):
		return as.Create(ctx, rep)
	case err != nil:
		return err
	}
	rep.ResourceVersion = current.ResourceVersion
	return as.Update(ctx, rep)
}

func line(breaker string, state resiliencev1alpha1.State, reason string, since time.Time) resiliencev1alpha1.BreakerReportEntry {
	return resiliencev1alpha1.BreakerReportEntry{Name: breaker, PodCircuit: resiliencev1alpha1.PodCircuit{State: state, Since: metav1.NewTime(since), ConfigGeneration: 1}, Reason: reason}
}

// Each spec is an attack of issue 18 made by one pod under its own identity; each failed
// to hold before the operator bounded what a report says (docs/rbac.md lists them).
var _ = Describe("What one pod's reports cannot do to the fleet", func() {
	var ns string
	BeforeEach(func(ctx SpecContext) { ns = newNamespace(ctx) })

	verdictOf := func(g Gomega, ctx context.Context, name string) map[string]any {
		v, _ := published(g, ctx, ns, name)["verdict"].(map[string]any)
		return v
	}

	It("cannot hold the fleet closed for a century with a forged managedFields time", func(ctx SpecContext) {
		Expect(k8sClient.Create(ctx, newBreaker(ns, "century", fleet(50), func(s *resiliencev1alpha1.CircuitBreakerSpec) {
			s.OpenTimeout = &metav1.Duration{Duration: time.Minute}
		}))).To(Succeed())
		century := time.Now().AddDate(100, 0, 0)
		rogue := asPod(ctx, ns, "pod-d")
		forged := ownReport(ctx, ns, "pod-d", line("century", resiliencev1alpha1.StateClosed, succeeded, century))
		Eventually(func() error { return writeOwn(ctx, rogue, forged.DeepCopy()) }).Should(Succeed())
		// An update may carry managedFields of the client's making (a create's are reset).
		Expect(rogue.Get(ctx, client.ObjectKeyFromObject(forged), forged)).To(Succeed())
		forged.ManagedFields = append(forged.ManagedFields, metav1.ManagedFieldsEntry{
			Manager: "kube-apiserver", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: resiliencev1alpha1.GroupVersion.String(),
			Time: ptr.To(metav1.NewTime(century)), FieldsType: "FieldsV1",
			FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{"f:labels":{}}}`),
		})
		Expect(rogue.Update(ctx, forged)).To(Succeed())
		var stored resiliencev1alpha1.BreakerReport
		Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "pod-d"}, &stored)).To(Succeed())
		Expect(stored.ManagedFields).To(ContainElement(HaveField("Time.Time", BeTemporally("~", century, time.Second))),
			"the API server keeps a client-written managedFields time: the attack is real")

		for _, p := range []string{"pod-a", "pod-b", "pod-c"} {
			reports(ctx, ns, p, entry("century", "Open", "Tripped", time.Now(), 1))
		}
		heldOpen := func(g Gomega) {
			v := verdictOf(g, ctx, "century")
			g.Expect(v).To(HaveKeyWithValue("state", "Open"))
			g.Expect(condition(getBreaker(g, ctx, ns, "century"), "Open").Status).To(Equal(metav1.ConditionTrue))
		}
		Eventually(heldOpen).Should(Succeed())
		Consistently(heldOpen, "2s").Should(Succeed())
	})

	It("cannot hold the fleet open longer than the spec's maxOpenTimeout", func(ctx SpecContext) {
		Expect(k8sClient.Create(ctx, newBreaker(ns, "forever", fleet(0), func(s *resiliencev1alpha1.CircuitBreakerSpec) {
			s.OpenTimeout, s.MaxOpenTimeout = &metav1.Duration{Duration: 10 * time.Second}, &metav1.Duration{Duration: time.Minute}
		}))).To(Succeed())
		reports(ctx, ns, "honest", entry("forever", "Closed", "Started", time.Now(), 1))
		e := line("forever", resiliencev1alpha1.StateOpen, tripped, time.Now())
		e.OpenTimeout, e.ConsecutiveOpens = &metav1.Duration{Duration: 876000 * time.Hour}, math.MaxInt32
		rogue := asPod(ctx, ns, "rogue")
		Eventually(func() error { return writeOwn(ctx, rogue, ownReport(ctx, ns, "rogue", e)) }).Should(Succeed())
		Eventually(func(g Gomega) {
			v := verdictOf(g, ctx, "forever")
			g.Expect(v).To(HaveKeyWithValue("state", "Open"))
			// 10s doubled up to 1m: 10s, 20s, 40s, then 1m however many opens it counts.
			g.Expect(v).To(HaveKeyWithValue("openTimeout", "1m0s"))
			g.Expect(v).To(HaveKeyWithValue("consecutiveOpens", BeEquivalentTo(counting.MaxCountedOpens)))
			cb := getBreaker(g, ctx, ns, "forever")
			g.Expect(cb.Status.OpenTimeout).To(Equal(&metav1.Duration{Duration: time.Minute}))
			g.Expect(cb.Status.ConsecutiveOpens).To(BeEquivalentTo(counting.MaxCountedOpens))
		}).Should(Succeed())
	})

	It("cannot freeze the status with key counts that overflow", func(ctx SpecContext) {
		Expect(k8sClient.Create(ctx, newBreaker(ns, "keys"))).To(Succeed())
		group := func(state resiliencev1alpha1.State, reason string, open int32) resiliencev1alpha1.BreakerReportEntry {
			e := line("keys", state, reason, time.Now())
			e.Keys = &resiliencev1alpha1.KeySummary{Keys: open, Open: open}
			return e
		}
		rogue := asPod(ctx, ns, "rogue")
		largest := int32(math.MaxInt32)
		err := writeOwn(ctx, rogue, ownReport(ctx, ns, "rogue", group(resiliencev1alpha1.StateClosed, started, largest)))
		if apierrors.IsInvalid(err) {
			// The schema bounds the count (api/v1alpha1): the attack is refused before the
			// operator sees it. The operator's sums must hold all the same.
			largest = resiliencev1alpha1.MaxGroupKeys
			err = writeOwn(ctx, rogue, ownReport(ctx, ns, "rogue", group(resiliencev1alpha1.StateClosed, started, largest)))
		}
		Expect(err).NotTo(HaveOccurred())
		other := asPod(ctx, ns, "other")
		Eventually(func() error {
			return writeOwn(ctx, other, ownReport(ctx, ns, "other", group(resiliencev1alpha1.StateOpen, tripped, largest)))
		}).Should(Succeed())
		Eventually(func(g Gomega) {
			cb := getBreaker(g, ctx, ns, "keys")
			g.Expect(cb.Status.State).To(Equal(resiliencev1alpha1.StateOpen), "another pod's open shows")
			g.Expect(cb.Status.Keys).NotTo(BeNil())
			g.Expect(int64(cb.Status.Keys.Open)).To(Equal(min(2*int64(largest), math.MaxInt32)))
		}).Should(Succeed())
	})

	It("cannot switch a Fleet breaker to a Group's aggregation by adding keys to its entry", func(ctx SpecContext) {
		Expect(k8sClient.Create(ctx, newBreaker(ns, "shape", fleet(100)))).To(Succeed())
		reports(ctx, ns, "a", entry("shape", "Open", "Tripped", time.Now(), 1))
		reports(ctx, ns, "b", entry("shape", "Closed", "Started", time.Now(), 1))
		Eventually(func(g Gomega) {
			cb := getBreaker(g, ctx, ns, "shape")
			g.Expect(cb.Status.MemberCounts).To(HaveField("Reporting", BeEquivalentTo(2)))
			g.Expect(cb.Status.State).To(Equal(resiliencev1alpha1.StateHalfOpen))
		}).Should(Succeed())
		e := line("shape", resiliencev1alpha1.StateClosed, started, time.Now())
		e.Keys = &resiliencev1alpha1.KeySummary{}
		rogue := asPod(ctx, ns, "rogue")
		Eventually(func() error { return writeOwn(ctx, rogue, ownReport(ctx, ns, "rogue", e)) }).Should(Succeed())
		fleetRule := func(g Gomega) {
			cb := getBreaker(g, ctx, ns, "shape")
			g.Expect(cb.Status.Keys).To(BeNil())
			g.Expect(cb.Status.State).To(Equal(resiliencev1alpha1.StateHalfOpen), "1 of 2 pods open, quorum 100%: the fleet is not open")
			g.Expect(condition(cb, "Open").Message).To(Equal("1 of 2 pods open on their own evidence, quorum 100% needs 2"))
			c := condition(cb, "ConfigApplied")
			g.Expect(c.Reason).To(Equal(ReasonReportShapesMixed))
			g.Expect(c.Message).To(HaveSuffix("left out: rogue"))
		}
		Eventually(fleetRule).Should(Succeed())
		Consistently(fleetRule, "1s").Should(Succeed())
		Eventually(func() []string { return eventNotes(ctx, ns, "shape", EventReportShapeIgnored) }).Should(
			ConsistOf(ContainSubstring("left out: rogue")))
	})

	It("cannot close a fleet nine pods hold open with one Closed no probe could have earned", func(ctx SpecContext) {
		Expect(k8sClient.Create(ctx, newBreaker(ns, "nine", fleet(50), func(s *resiliencev1alpha1.CircuitBreakerSpec) {
			s.OpenTimeout = &metav1.Duration{Duration: time.Minute}
		}))).To(Succeed())
		for i := range 9 {
			reports(ctx, ns, "holder-"+string(rune('a'+i)), entry("nine", "Open", "Tripped", time.Now(), 1))
		}
		rogue := asPod(ctx, ns, "rogue")
		Eventually(func() error {
			return writeOwn(ctx, rogue, ownReport(ctx, ns, "rogue", line("nine", resiliencev1alpha1.StateClosed, started, time.Now())))
		}).Should(Succeed())
		stillOpen := func(g Gomega) {
			g.Expect(verdictOf(g, ctx, "nine")).To(HaveKeyWithValue("state", "Open"))
			cb := getBreaker(g, ctx, ns, "nine")
			g.Expect(cb.Status.MemberCounts).To(HaveField("Reporting", BeEquivalentTo(10)))
			g.Expect(condition(cb, "Open").Status).To(Equal(metav1.ConditionTrue))
		}
		Eventually(stillOpen).Should(Succeed())

		// Dated inside the skew window: not clamped, and after the fleet's open.
		Expect(writeOwn(ctx, rogue, ownReport(ctx, ns, "rogue",
			line("nine", resiliencev1alpha1.StateClosed, succeeded, time.Now().Add(1500*time.Millisecond))))).To(Succeed())
		Consistently(stillOpen, "3s").Should(Succeed())
	})

	It("cannot hold an override beyond 7 days when written around the webhook", func(ctx SpecContext) {
		asked := time.Now().Add(8 * 24 * time.Hour).Truncate(time.Second)
		cb := newBreaker(ns, "held")
		cb.Spec.Override = &resiliencev1alpha1.Override{Mode: resiliencev1alpha1.ModeForcedOpen, Until: metav1.NewTime(asked), Reason: "INC-9"}
		Expect(k8sClient.Create(ctx, cb)).To(Succeed())
		created := time.Now()
		Eventually(func(g Gomega) {
			c := overriddenCondition(g, ctx, ns, "held")
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(c.Message).To(ContainSubstring("spec.override.until " + asked.UTC().Format(time.RFC3339) + " is more than 7 days after"))
			g.Expect(published(g, ctx, ns, "held")).To(HaveKeyWithValue("mode", "ForcedOpen"))
		}).Should(Succeed())
		// The bound is 7 days after the operator first saw it, not the 8 asked.
		c := overriddenCondition(Default, ctx, ns, "held")
		var until time.Time
		_, err := fmtSscanUntil(c.Message, &until)
		Expect(err).NotTo(HaveOccurred())
		Expect(until).To(BeTemporally("~", created.Add(resiliencev1alpha1.MaxOverrideDuration), 5*time.Second))
	})
})

// fmtSscanUntil reads the until out of an Overridden message ("Held M until T by ...").
func fmtSscanUntil(message string, until *time.Time) (int, error) {
	var mode, at string
	n, err := fmt.Sscanf(message, "Held %s until %s by", &mode, &at)
	if err != nil {
		return n, err
	}
	*until, err = time.Parse(time.RFC3339, at)
	return n, err
}
