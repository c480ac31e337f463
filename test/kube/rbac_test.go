package kube_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
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
	"sigs.k8s.io/yaml"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/kube"
)

// bindBreakerClientRole creates the ClusterRole that config/rbac ships for applications
// (renamed for the test's namespace: it is cluster-scoped) and binds it in ns to subject.
func bindBreakerClientRole(t *testing.T, ns string, subject rbacv1.Subject) {
	t.Helper()
	raw, err := os.ReadFile("../../config/rbac/breaker_client_role.yaml")
	must(t, err)
	var role rbacv1.ClusterRole
	must(t, yaml.Unmarshal(raw, &role))
	role.Name = "fusebox-breaker-client-" + ns
	ctx := context.Background()
	must(t, k8sClient.Create(ctx, &role))
	t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), &role) })
	must(t, k8sClient.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app-breaker-client"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{subject},
	}))
}

// TestRunsWithTheBreakerClientRole runs a pod with only the ClusterRole that
// config/rbac ships for applications, bound in its namespace: what the package does must
// stay within it.
func TestRunsWithTheBreakerClientRole(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	user := "system:serviceaccount:" + ns + ":app"
	bindBreakerClientRole(t, ns, rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user})

	p := testPolicy()
	p.HalfOpenPermittedCalls = 3
	writeConfigMap(t, ns, map[string]string{"guarded.json": render(t, "guarded", 2, p, "Pod", nil)})
	// The UID from the downward API (POD_UID): the role gives no access to Pods.
	// As the API server authenticates the pod's own projected token: the admission
	// policy refuses a service account's report written with a token bound to no pod.
	asPod := func(pod string) func(*kube.Options) {
		return func(o *kube.Options) {
			o.Config.Impersonate.UserName = user
			o.Config.Impersonate.Extra = map[string][]string{"authentication.kubernetes.io/pod-name": {pod}}
		}
	}
	in := startInstance(t, ns, "app-1", instanceOptions{
		breakers: []string{"guarded"},
		passUID:  true,
		modify:   asPod("app-1"),
	})
	eventually(t, propagation, func() error { return policyIs([]*instance{in}, "guarded", p) })
	eventually(t, propagation, func() error {
		return memberIs(ns, "guarded", "app-1", wantEntry(resiliencev1alpha1.StateClosed, 2))
	})
	if s := in.agent.Stats(); s.WriteFailures != 0 || s.LastWriteError != "" {
		t.Errorf("stats %+v: some writes were refused", s)
	}

	// Without it, the agent cannot learn its UID, and says to set POD_UID; its breakers run.
	blind := startInstance(t, ns, "app-2", instanceOptions{
		breakers: []string{"guarded"},
		modify:   asPod("app-2"),
	})
	eventually(t, propagation, func() error {
		if s := blind.agent.Stats(); !strings.Contains(s.LastWriteError, kube.EnvPodUID) || !strings.Contains(s.LastWriteError, "forbidden") {
			return fmt.Errorf("stats %+v: want the refused read of the Pod, naming %s", s, kube.EnvPodUID)
		}
		return nil
	})
	eventually(t, propagation, func() error { return policyIs([]*instance{blind}, "guarded", p) })
}

// TestPodWritesOnlyItsOwnReport: the API server itself (config/policy's admission policy,
// installed as config/default installs it) refuses a report written by a pod's service
// account token unless it is that pod's, named after it and owned by it. The token is
// impersonated with the extra the API server gives a token bound to a pod.
func TestPodWritesOnlyItsOwnReport(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	ctx := context.Background()
	must(t, k8sClient.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}}))
	bindBreakerClientRole(t, ns, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "app"})
	uidA, uidB := createPod(t, ns, "pod-a"), createPod(t, ns, "pod-b")

	// As the API server authenticates a token of service account app mounted in pod-a.
	asPodA := func(withUID bool) *rest.Config {
		c := rest.CopyConfig(cfg)
		extra := map[string][]string{"authentication.kubernetes.io/pod-name": {"pod-a"}}
		if withUID {
			extra["authentication.kubernetes.io/pod-uid"] = []string{string(uidA)}
		}
		c.Impersonate = rest.ImpersonationConfig{
			UserName: "system:serviceaccount:" + ns + ":app",
			Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
			Extra:    extra,
		}
		return c
	}
	podA, err := client.New(asPodA(false), client.Options{Scheme: scheme})
	must(t, err)
	podAWithUID, err := client.New(asPodA(true), client.Options{Scheme: scheme})
	must(t, err)
	reportNamed := func(name, owner string, uid types.UID) *resiliencev1alpha1.BreakerReport {
		return &resiliencev1alpha1.BreakerReport{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: ns, Name: name,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: owner, UID: uid}},
			},
			Breakers: []resiliencev1alpha1.BreakerReportEntry{{
				Name: "forged", PodCircuit: resiliencev1alpha1.PodCircuit{State: resiliencev1alpha1.StateOpen,
					Since: metav1.NewTime(time.Now())}, Reason: breakerconfig.ReasonTripped,
			}},
		}
	}
	refused := func(err error, says ...string) error {
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

	// pod-a writes pod-b's report. A policy takes a moment to be enforced after it is
	// created (InstallPolicies ran just before the suite): dry runs until it is.
	eventually(t, propagation, func() error {
		return refused(podA.Create(ctx, reportNamed("pod-b", "pod-b", uidB), client.DryRunAll), "pod-a", "pod-b")
	})
	must(t, refused(podA.Create(ctx, reportNamed("pod-b", "pod-b", uidB)), "pod pod-a may write only the BreakerReport named pod-a"))
	// Its own name, but owned by another Pod.
	must(t, refused(podA.Create(ctx, reportNamed("pod-a", "pod-b", uidB)), "exactly one ownerReference, to that Pod; it has Pod pod-b"))
	// Its own name and Pod name, but not its Pod's UID, with a token that carries it.
	must(t, refused(podAWithUID.Create(ctx, reportNamed("pod-a", "pod-a", uidB)), "uid "+string(uidA)))
	if _, _, err := reportOf(ns, "pod-b"); !apierrors.IsNotFound(err) {
		t.Errorf("pod-b's report after pod-a's forgery: %v, want none", err)
	}

	// Its own is accepted, and so is its update.
	own := reportNamed("pod-a", "pod-a", uidA)
	must(t, podAWithUID.Create(ctx, own))
	own.Breakers[0].State = resiliencev1alpha1.StateClosed
	must(t, podA.Update(ctx, own))
	must(t, k8sClient.Delete(ctx, own))

	// The role no longer lets a pod touch a CircuitBreaker's status.
	cb := &resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cart"}}
	must(t, k8sClient.Create(ctx, cb))
	patch := client.MergeFrom(cb.DeepCopy())
	cb.Status.State = resiliencev1alpha1.StateOpen
	if err := podA.Status().Patch(ctx, cb, patch); !apierrors.IsForbidden(err) {
		t.Errorf("patch of a CircuitBreaker's status as the pod: %v, want Forbidden", err)
	}

	// An agent running as pod-a reports as usual.
	writeConfigMap(t, ns, map[string]string{"cart.json": render(t, "cart", 1, testPolicy(), "Pod", nil)})
	var logs syncBuffer
	actx, cancel := context.WithCancel(ctx)
	a, err := kube.Connect(actx, kube.Options{
		Config: asPodA(true), Namespace: ns, Pod: "pod-a", PodUID: string(uidA),
		Logger: slog.New(slog.NewTextHandler(io.MultiWriter(&logs, logWriter(t, new(syncBuffer))), nil)),
	})
	must(t, err)
	defer func() { cancel(); <-a.Done() }()
	a.Registry().Get("cart").Trip()
	eventually(t, propagation, func() error {
		return memberIs(ns, "cart", "pod-a", wantReason(resiliencev1alpha1.StateOpen, breakerconfig.ReasonManual))
	})
	if s := a.Stats(); s.WriteFailures != 0 {
		t.Errorf("agent as pod-a: stats %+v, want no failed write\n%s", s, logs.String())
	}
	// An agent told it is pod-b while its token is pod-a's is refused, and says so.
	b, err := kube.Connect(actx, kube.Options{
		Config: asPodA(true), Namespace: ns, Pod: "pod-b", PodUID: string(uidB),
		Logger: slog.New(slog.DiscardHandler),
	})
	must(t, err)
	defer func() { cancel(); <-b.Done() }()
	b.Registry().Get("cart")
	eventually(t, propagation, func() error {
		s := b.Stats()
		if s.Rejected == 0 || !strings.Contains(s.LastWriteError, "may write only the BreakerReport named pod-a") {
			return errors.New("the impostor's report was not refused: " + fmt.Sprintf("%+v", s))
		}
		return nil
	})
	if _, _, err := reportOf(ns, "pod-b"); !apierrors.IsNotFound(err) {
		t.Errorf("pod-b's report: %v, want none", err)
	}
}
