package kube

import (
	"context"
	"os"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// TestRunsWithTheBreakerClientRole runs a pod with only the ClusterRole that
// config/rbac ships for applications, bound in its namespace: what the package does must
// stay within it.
func TestRunsWithTheBreakerClientRole(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	raw, err := os.ReadFile("../../../config/rbac/breaker_client_role.yaml")
	must(t, err)
	var role rbacv1.ClusterRole
	must(t, yaml.Unmarshal(raw, &role))
	role.Name = "fusebox-breaker-client-" + ns // cluster-scoped: one per test namespace
	ctx := context.Background()
	must(t, k8sClient.Create(ctx, &role))
	t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), &role) })
	user := "system:serviceaccount:" + ns + ":app"
	must(t, k8sClient.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app-breaker-client"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}))

	createBreaker(t, ns, "guarded")
	p := testPolicy()
	p.HalfOpenPermittedCalls = 3
	writeConfigMap(t, ns, map[string]string{"guarded.json": render(t, "guarded", 2, p, "Pod", nil)})
	in := startInstance(t, ns, "app-1", instanceOptions{
		breakers: []string{"guarded"},
		modify:   func(o *Options) { o.Config.Impersonate.UserName = user },
	})
	eventually(t, propagation, func() error { return policyIs([]*instance{in}, "guarded", p) })
	eventually(t, propagation, func() error {
		return memberIs(ns, "guarded", "app-1", wantEntry(resiliencev1alpha1.StateClosed, 2))
	})
	if s := in.agent.Stats(); s.WriteFailures != 0 || s.Dropped != 0 {
		t.Errorf("stats %+v: some writes were refused", s)
	}
}
