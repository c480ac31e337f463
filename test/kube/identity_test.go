package kube_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// podIdentity is how the API server authenticates the token of service account sa mounted
// in pod: the user name, groups and extras of a pod-bound token. uid "" leaves out the
// pod-uid extra; pod "" leaves out both extras (a token bound to no pod).
func podIdentity(ns, sa, pod string, uid types.UID) *rest.Config {
	c := rest.CopyConfig(cfg)
	extra := map[string][]string{}
	if pod != "" {
		extra["authentication.kubernetes.io/pod-name"] = []string{pod}
	}
	if uid != "" {
		extra["authentication.kubernetes.io/pod-uid"] = []string{string(uid)}
	}
	c.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + ns + ":" + sa,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
		Extra:    extra,
	}
	return c
}

func clientAs(t *testing.T, c *rest.Config) client.Client {
	t.Helper()
	cl, err := client.New(c, client.Options{Scheme: scheme})
	must(t, err)
	return cl
}

// forgedReport is a BreakerReport named name in ns with the given owners and one Open entry.
func forgedReport(ns, name string, owners ...metav1.OwnerReference) *resiliencev1alpha1.BreakerReport {
	return &resiliencev1alpha1.BreakerReport{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, OwnerReferences: owners},
		Breakers: []resiliencev1alpha1.BreakerReportEntry{{
			Name: "cart", State: resiliencev1alpha1.StateOpen, Reason: breakerconfig.ReasonTripped,
			Since: metav1.NewTime(time.Now()),
		}},
	}
}

func podOwner(name string, uid types.UID) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: name, UID: uid}
}

// refusedSaying returns nil if err is a refusal that says each of says.
func refusedSaying(err error, says ...string) error {
	if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
		return fmt.Errorf("%v, want a refusal", err)
	}
	for _, s := range says {
		if !strings.Contains(err.Error(), s) {
			return fmt.Errorf("refusal %q does not say %q", err, s)
		}
	}
	return nil
}

// TestPodIdentityIsExact: the identity edges of issue 18, each refused by the API server
// itself (config/policy, as installed by config/default). A pod writes only the report
// named after it, in its service account's namespace, with exactly one ownerReference: its
// Pod, by UID when the token carries it. And a pod reads no Pod at all.
func TestPodIdentityIsExact(t *testing.T) {
	t.Parallel()
	ns, other := newNamespace(t), newNamespace(t)
	ctx := context.Background()
	for _, n := range []string{ns, other} {
		must(t, k8sClient.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: n, Name: "app"}}))
	}
	// The role is bound in ns to its own app and, by a RoleBinding someone added, to the app
	// of the other namespace: RBAC lets both write any report in ns.
	bindBreakerClientRole(t, ns, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "app"})
	must(t, k8sClient.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "guest-breaker-client"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "fusebox-breaker-client-" + ns},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: other, Name: "app"}},
	}))
	uidA, uidB := createPod(t, ns, "pod-a"), createPod(t, ns, "pod-b")
	guestUID := createPod(t, other, "pod-b")
	podA := clientAs(t, podIdentity(ns, "app", "pod-a", uidA))
	podANoUID := clientAs(t, podIdentity(ns, "app", "pod-a", ""))
	guest := clientAs(t, podIdentity(other, "app", "pod-b", guestUID))
	guestNoUID := clientAs(t, podIdentity(other, "app", "pod-b", ""))

	// The policies are enforced a moment after they are created: dry runs until they are.
	eventually(t, propagation, func() error {
		return refusedSaying(podA.Create(ctx, forgedReport(ns, "pod-b", podOwner("pod-b", uidB)), client.DryRunAll), "pod-a")
	})
	for _, tc := range []struct {
		name string
		as   client.Client
		r    *resiliencev1alpha1.BreakerReport
		says []string
	}{
		{"a pod of another namespace writes the report of its namesake, keeping the real owner first and adding its own",
			guest, forgedReport(ns, "pod-b", podOwner("pod-b", uidB), podOwner("pod-b", guestUID)),
			[]string{"may write its BreakerReport only in its own namespace " + other + ", not " + ns}},
		{"a pod of another namespace writes the report of its namesake, owned by it, with a token without its UID",
			guestNoUID, forgedReport(ns, "pod-b", podOwner("pod-b", uidB)),
			[]string{"only in its own namespace " + other}},
		{"a second Pod ownerReference of a wrong UID",
			podA, forgedReport(ns, "pod-a", podOwner("pod-a", uidA), podOwner("pod-a", uidB)),
			[]string{"exactly one ownerReference, to that Pod (uid " + string(uidA) + "); it has Pod pod-a (uid " + string(uidA) + "), Pod pod-a (uid " + string(uidB) + ")"}},
		{"a second Pod ownerReference, with a token without the UID",
			podANoUID, forgedReport(ns, "pod-a", podOwner("pod-a", uidA), podOwner("pod-b", uidB)),
			[]string{"exactly one ownerReference", "it has Pod pod-a (uid " + string(uidA) + "), Pod pod-b"}},
		{"owned by the CircuitBreaker too",
			podA, forgedReport(ns, "pod-a", podOwner("pod-a", uidA),
				metav1.OwnerReference{APIVersion: resiliencev1alpha1.GroupVersion.String(), Kind: "CircuitBreaker", Name: "cart", UID: "5d0c3b0e-0000-4000-8000-000000000001"}),
			[]string{"exactly one ownerReference", "CircuitBreaker cart"}},
		{"owned by the CircuitBreaker alone",
			podA, forgedReport(ns, "pod-a",
				metav1.OwnerReference{APIVersion: resiliencev1alpha1.GroupVersion.String(), Kind: "CircuitBreaker", Name: "cart", UID: "5d0c3b0e-0000-4000-8000-000000000001"}),
			[]string{"exactly one ownerReference, to that Pod"}},
		{"owned by nothing", podA, forgedReport(ns, "pod-a"), []string{"exactly one ownerReference", "it has none"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := refusedSaying(tc.as.Create(ctx, tc.r), tc.says...); err != nil {
				t.Error(err)
			}
			if _, _, err := reportOf(tc.r.Namespace, tc.r.Name); !apierrors.IsNotFound(err) {
				t.Errorf("report %s/%s after the refusal: %v, want none", tc.r.Namespace, tc.r.Name, err)
			}
		})
	}

	// Its own, exactly, is accepted, with the UID or without it in the token.
	own := forgedReport(ns, "pod-a", podOwner("pod-a", uidA))
	must(t, podA.Create(ctx, own))
	own.Breakers[0].State = resiliencev1alpha1.StateClosed
	must(t, podANoUID.Update(ctx, own))
	// An update may not add an owner either.
	own.OwnerReferences = append(own.OwnerReferences, podOwner("pod-b", uidB))
	if err := refusedSaying(podA.Update(ctx, own), "exactly one ownerReference"); err != nil {
		t.Error(err)
	}

	// The role gives no access to Pods: a pod learns its own UID from the downward API and
	// reads no other pod's spec.
	var p corev1.Pod
	if err := podA.Get(ctx, client.ObjectKey{Namespace: ns, Name: "pod-b"}, &p); !apierrors.IsForbidden(err) {
		t.Errorf("pod-a reading pod-b's Pod: %v, want Forbidden", err)
	}
	if err := podA.Get(ctx, client.ObjectKey{Namespace: ns, Name: "pod-a"}, &p); !apierrors.IsForbidden(err) {
		t.Errorf("pod-a reading its own Pod: %v, want Forbidden", err)
	}
	// Nor CircuitBreakers, nor any ConfigMap but the published one.
	cb := &resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cart"}}
	if err := podA.Create(ctx, cb); !apierrors.IsForbidden(err) {
		t.Errorf("pod-a creating a CircuitBreaker: %v, want Forbidden", err)
	}
	must(t, k8sClient.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app-settings"}}))
	var cm corev1.ConfigMap
	if err := podA.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app-settings"}, &cm); !apierrors.IsForbidden(err) {
		t.Errorf("pod-a reading another ConfigMap: %v, want Forbidden", err)
	}
}

// TestTokenBoundToNoPodIsRefused: issue 29's attack 7. A service account token that is
// bound to no pod (a long-lived Secret token, a TokenRequest without a bound object)
// carries no pod-name, so the identity policy cannot tell which report is its own; the
// API server refuses its report writes outright (config/policy's
// fusebox-breakerreport-bound-token), naming the opt-out. In a namespace labelled to accept
// such tokens, RBAC alone judges them, as before the policy: they may write any report
// there. A service account the role is not bound to writes nothing either way.
func TestTokenBoundToNoPodIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	setUp := func() (string, types.UID) {
		ns := newNamespace(t)
		must(t, k8sClient.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}}))
		bindBreakerClientRole(t, ns, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "app"})
		uidB := createPod(t, ns, "pod-b")
		eventually(t, propagation, func() error { return podIdentityRefuses(ctx, ns, uidB) })
		return ns, uidB
	}

	ns, uidB := setUp()
	unbound := clientAs(t, podIdentity(ns, "app", "", ""))
	eventually(t, propagation, func() error {
		return refusedSaying(unbound.Create(ctx, forgedReport(ns, "pod-b", podOwner("pod-b", uidB)), client.DryRunAll),
			"system:serviceaccount:"+ns+":app writes BreakerReports with a token bound to no pod",
			resiliencev1alpha1.LabelUnboundReportTokens+"="+resiliencev1alpha1.LabelUnboundReportTokensAllowed)
	})
	if err := refusedSaying(unbound.Create(ctx, forgedReport(ns, "pod-b", podOwner("pod-b", uidB))), "bound to no pod"); err != nil {
		t.Error(err)
	}
	if _, _, err := reportOf(ns, "pod-b"); !apierrors.IsNotFound(err) {
		t.Errorf("pod-b's report after the refusal: %v, want none", err)
	}
	// Its pod's own token still writes; and an update by the unbound token is refused too.
	podB := clientAs(t, podIdentity(ns, "app", "pod-b", uidB))
	own := forgedReport(ns, "pod-b", podOwner("pod-b", uidB))
	must(t, podB.Create(ctx, own))
	own.Breakers[0].State = resiliencev1alpha1.StateClosed
	if err := refusedSaying(unbound.Update(ctx, own), "bound to no pod"); err != nil {
		t.Error(err)
	}

	// The opt-out: a namespace labelled to accept tokens bound to no pod.
	optedOut, uidB2 := setUp()
	var n corev1.Namespace
	must(t, k8sClient.Get(ctx, client.ObjectKey{Name: optedOut}, &n))
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	n.Labels[resiliencev1alpha1.LabelUnboundReportTokens] = resiliencev1alpha1.LabelUnboundReportTokensAllowed
	must(t, k8sClient.Update(ctx, &n))
	unbound = clientAs(t, podIdentity(optedOut, "app", "", ""))
	eventually(t, propagation, func() error {
		return unbound.Create(ctx, forgedReport(optedOut, "pod-b", podOwner("pod-b", uidB2)), client.DryRunAll)
	})
	must(t, unbound.Create(ctx, forgedReport(optedOut, "pod-b", podOwner("pod-b", uidB2))))
	// A service account the role is not bound to writes nothing.
	stranger := clientAs(t, podIdentity(optedOut, "default", "", ""))
	if err := stranger.Create(ctx, forgedReport(optedOut, "pod-c")); !apierrors.IsForbidden(err) {
		t.Errorf("a service account without the role: %v, want Forbidden", err)
	}
}

// podIdentityRefuses returns nil once the identity policy is enforced in ns: a pod-bound
// token of pod-a is refused pod-b's report.
func podIdentityRefuses(ctx context.Context, ns string, uidB types.UID) error {
	c, err := client.New(podIdentity(ns, "app", "pod-a", ""), client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	return refusedSaying(c.Create(ctx, forgedReport(ns, "pod-b", podOwner("pod-b", uidB)), client.DryRunAll), "pod-a")
}
