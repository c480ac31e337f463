package webhook_test

import (
	"context"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/webhook/circuitbreaker"
)

// clientAs returns a direct client that the API server authenticates as user, a member of
// group (envtest's admin impersonates them), so the webhook sees user in the request. Not
// a member of system:masters, which the overridden-by admission policy exempts.
func clientAs(user, group string) client.Client {
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{group, "system:authenticated"}}
	cl, err := client.New(c, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	return cl
}

// breakerEditors lets the members of a group of the spec's own edit CircuitBreakers in ns,
// and returns the group.
func breakerEditors(ns string) string {
	ctx := context.Background()
	group := "breaker-editors-" + ns
	Expect(k8sClient.Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "breaker-editor"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{resiliencev1alpha1.GroupVersion.Group}, Resources: []string{"circuitbreakers"},
			Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}},
	})).To(Succeed())
	Expect(k8sClient.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "breaker-editors"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "breaker-editor"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: group}},
	})).To(Succeed())
	return group
}

// policiesEnforced waits until the API server enforces config/policy's admission policies,
// which the suite installed just before: the one on names, installed with the others,
// refuses a dry run.
func policiesEnforced(ns string) {
	GinkgoHelper()
	long := newBreaker(ns, resiliencev1alpha1.CircuitBreakerSpec{}, nil)
	long.GenerateName, long.Name = "", strings.Repeat("n", circuitbreaker.MaxNameLength+1)
	Eventually(func() error { return k8sClient.Create(context.Background(), long, client.DryRunAll) }).
		Should(MatchError(ContainSubstring("ValidatingAdmissionPolicy")))
}

func overrideSpec(until time.Time, reason string) resiliencev1alpha1.CircuitBreakerSpec {
	return resiliencev1alpha1.CircuitBreakerSpec{Override: &resiliencev1alpha1.Override{
		Mode: resiliencev1alpha1.ModeForcedOpen, Until: metav1.NewTime(until), Reason: reason}}
}

var _ = Describe("CircuitBreaker overrides", func() {
	var (
		ctx = context.Background()
		ns  string
	)
	BeforeEach(func() { ns = newNamespace() })

	DescribeTable("refuses an override that would hold nothing, hold too long or say no reason, naming the field",
		func(spec func() resiliencev1alpha1.CircuitBreakerSpec, field, says string) {
			err := k8sClient.Create(ctx, newBreaker(ns, spec(), nil))
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
			Expect(causeFields(err)).To(ContainElement(field))
			Expect(err.Error()).To(ContainSubstring(says))
		},
		Entry("until in the past", func() resiliencev1alpha1.CircuitBreakerSpec {
			return overrideSpec(time.Now().Add(-time.Minute), "INC-1")
		},
			"spec.override.until", "must be in the future"),
		Entry("until more than 7 days ahead", func() resiliencev1alpha1.CircuitBreakerSpec {
			return overrideSpec(time.Now().Add(resiliencev1alpha1.MaxOverrideDuration+time.Hour), "INC-1")
		}, "spec.override.until", "must be at most 7 days ahead"),
		Entry("a missing reason (the schema's)", func() resiliencev1alpha1.CircuitBreakerSpec { return overrideSpec(time.Now().Add(time.Hour), "") },
			"spec.override.reason", "not be blank"),
		Entry("a blank reason", func() resiliencev1alpha1.CircuitBreakerSpec { return overrideSpec(time.Now().Add(time.Hour), "   ") },
			"spec.override.reason", "say why the circuit is held"),
	)

	It("accepts an unrelated update of an object whose override ran out, and judges a changed one", func() {
		// The API server keeps whole seconds: the until is at least 2s ahead.
		until := time.Now().Add(3 * time.Second)
		cb := newBreaker(ns, overrideSpec(until, "INC-1"), nil)
		Expect(k8sClient.Create(ctx, cb)).To(Succeed())
		Eventually(func() time.Time { return time.Now() }, "10s").Should(BeTemporally(">", until))

		patch := client.MergeFrom(cb.DeepCopy())
		cb.Spec.Window = duration("20s")
		cb.Labels = map[string]string{"team": "payments"}
		Expect(k8sClient.Patch(ctx, cb, patch)).To(Succeed())

		patch = client.MergeFrom(cb.DeepCopy())
		cb.Spec.Override.Reason = "INC-2"
		err := k8sClient.Patch(ctx, cb, patch)
		Expect(causeFields(err)).To(Equal([]string{"spec.override.until"}))
	})

	// With the overridden-by admission policy enforced too, as config/default installs it:
	// every write the webhook lets through is one the policy accepts.
	It("records who set the override, as the API server authenticated them", func() {
		const key = resiliencev1alpha1.AnnotationOverriddenBy
		policiesEnforced(ns)
		editors := breakerEditors(ns)
		alice, bob := clientAs("alice@example.com", editors), clientAs("bob@example.com", editors)
		annotation := func(cb *resiliencev1alpha1.CircuitBreaker) string {
			var got resiliencev1alpha1.CircuitBreaker
			Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(cb), &got)).To(Succeed())
			if v, ok := got.Annotations[key]; ok {
				return v
			}
			return "<none>"
		}

		By("replacing what the client wrote when the override is set")
		cb := newBreaker(ns, overrideSpec(time.Now().Add(time.Hour), "INC-1"), map[string]string{key: "mallory"})
		Expect(alice.Create(ctx, cb)).To(Succeed())
		Expect(cb.Annotations).To(HaveKeyWithValue(key, "alice@example.com"))

		By("keeping it, and refusing a forged one, when the override is left alone")
		patch := client.MergeFrom(cb.DeepCopy())
		cb.Annotations[key] = "bob@example.com"
		cb.Labels = map[string]string{"team": "payments"}
		Expect(bob.Patch(ctx, cb, patch)).To(Succeed())
		Expect(annotation(cb)).To(Equal("alice@example.com"))

		By("recording whoever changes the override")
		patch = client.MergeFrom(cb.DeepCopy())
		cb.Spec.Override.Until = metav1.NewTime(time.Now().Add(2 * time.Hour))
		Expect(bob.Patch(ctx, cb, patch)).To(Succeed())
		Expect(annotation(cb)).To(Equal("bob@example.com"))

		By("removing it with the override")
		patch = client.MergeFrom(cb.DeepCopy())
		cb.Spec.Override = nil
		Expect(alice.Patch(ctx, cb, patch)).To(Succeed())
		Expect(annotation(cb)).To(Equal("<none>"))

		By("refusing a forged one on an object without an override")
		patch = client.MergeFrom(cb.DeepCopy())
		cb.Annotations = map[string]string{key: "alice@example.com"}
		Expect(bob.Patch(ctx, cb, patch)).To(Succeed())
		Expect(annotation(cb)).To(Equal("<none>"))
	})
})
