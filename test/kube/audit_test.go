package kube_test

import (
	"context"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// person is a client authenticated as user name, a member of group (bound by the test to
// what it needs), not of system:masters, which the policy exempts.
func person(t *testing.T, name, group string) client.Client {
	t.Helper()
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{UserName: name, Groups: []string{group, "system:authenticated"}}
	return clientAs(t, c)
}

// breakerEditors lets the members of a group of the test's own edit CircuitBreakers in
// ns, and returns the group.
func breakerEditors(t *testing.T, ns string) string {
	t.Helper()
	ctx := context.Background()
	group := "breaker-editors-" + ns
	must(t, k8sClient.Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "breaker-editor"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{resiliencev1alpha1.GroupVersion.Group}, Resources: []string{"circuitbreakers"},
			Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}},
	}))
	must(t, k8sClient.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "breaker-editors"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "breaker-editor"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: group}},
	}))
	return group
}

// TestOverriddenByIsTrueWithoutTheWebhook: this suite runs no webhook, as a cluster whose
// mutating webhook is not installed (or is bypassed). The admission policy of config/policy
// still refuses a fusebox.dev/overridden-by that is not the requesting user's name, except
// a stored record kept as it was while spec.override is not changed (issue 18: a
// client-written record was stored as the audit record).
func TestOverriddenByIsTrueWithoutTheWebhook(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	ctx := context.Background()
	editors := breakerEditors(t, ns)
	alice, carol := person(t, "alice@example.com", editors), person(t, "carol@example.com", editors)
	until := metav1.NewTime(time.Now().Add(time.Hour).Truncate(time.Second))
	breaker := func(name, by string) *resiliencev1alpha1.CircuitBreaker {
		return &resiliencev1alpha1.CircuitBreaker{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{resiliencev1alpha1.AnnotationOverriddenBy: by}},
			Spec: resiliencev1alpha1.CircuitBreakerSpec{Override: &resiliencev1alpha1.Override{
				Mode: resiliencev1alpha1.ModeForcedOpen, Until: until, Reason: "INC-9",
			}},
		}
	}
	says := "records who set spec.override"

	// The policy takes a moment to be enforced: dry runs until it is.
	eventually(t, propagation, func() error {
		return refusedSaying(alice.Create(ctx, breaker("cart", "bob@example.com"), client.DryRunAll), says, "alice@example.com", "not bob@example.com")
	})
	must(t, refusedSaying(alice.Create(ctx, breaker("cart", "bob@example.com")), says))
	// Without an override too: the record names nobody but the writer.
	plain := breaker("plain", "bob@example.com")
	plain.Spec.Override = nil
	must(t, refusedSaying(alice.Create(ctx, plain), says))

	// Her own name is true.
	cb := breaker("cart", "alice@example.com")
	must(t, alice.Create(ctx, cb))
	// Carol edits something else: the record stays as it was.
	cb.Labels = map[string]string{"team": "payments"}
	must(t, carol.Update(ctx, cb))
	// Carol changes the override but leaves Alice's name: refused.
	cb.Spec.Override.Reason = "INC-9: still down"
	must(t, refusedSaying(carol.Update(ctx, cb), says, "carol@example.com", "not alice@example.com"))
	// Nor may she rewrite the record of Alice's override.
	cb.Spec.Override.Reason = "INC-9"
	cb.Annotations[resiliencev1alpha1.AnnotationOverriddenBy] = "mallory@example.com"
	must(t, refusedSaying(carol.Update(ctx, cb), says))
	// With her own name, the change is hers.
	cb.Spec.Override.Reason = "INC-9: still down"
	cb.Annotations[resiliencev1alpha1.AnnotationOverriddenBy] = "carol@example.com"
	must(t, carol.Update(ctx, cb))
	// Removing the override may leave its record behind as it was.
	cb.Spec.Override = nil
	must(t, alice.Update(ctx, cb))

	var got resiliencev1alpha1.CircuitBreaker
	must(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(cb), &got))
	if by := got.Annotations[resiliencev1alpha1.AnnotationOverriddenBy]; by != "carol@example.com" {
		t.Errorf("stored record %q, want carol@example.com", by)
	}

	// A member of system:masters (this suite's own client) is exempt: it could delete the
	// policy anyway.
	must(t, k8sClient.Create(ctx, breaker("by-admin", "alice@example.com")))
}
