package fleet

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/fusebox-dev/fusebox/internal/testenv"
)

// Who writes. The pods and the operator run under the identities a cluster gives them,
// not as the harness's administrator (which the API server exempts from priority and
// fairness, and which the admission policy does not judge): each pod as service account
// app of the fleet's namespace, with a token bound to its Pod; the operator as its service
// account as config/default deploys it, with config/rbac's ClusterRole. Both are
// impersonated, with the user info the API server would derive from their tokens.
const (
	appServiceAccount = "app"
	operatorNamespace = "fusebox-system"
	operatorAccount   = "fusebox-controller-manager"
	// The node agents' service account and ClusterRole, as config/default names them.
	nodeAgentAccount = "fusebox-node"
	nodeAgentRole    = "fusebox-node"
)

// installIdentities applies what a cluster with Fusebox installed holds for those
// identities: config/flowcontrol's FlowSchemas and priority levels, the operator's
// ClusterRole and its binding, and the pods' service account bound to
// fusebox-breaker-client. config/policy's admission policy is installed with the CRDs.
func (h *harness) installIdentities(ctx context.Context) error {
	if err := testenv.InstallFlowControl(h.cfg, repoRoot); err != nil {
		return fmt.Errorf("install flow control: %w", err)
	}
	for _, ns := range []string{operatorNamespace} {
		if _, err := h.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	if _, err := h.cs.CoreV1().ServiceAccounts(operatorNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: operatorAccount}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	manager, err := clusterRole(filepath.Join("config", "rbac", "role.yaml"), "fusebox-manager-role")
	if err != nil {
		return err
	}
	client, err := clusterRole(filepath.Join("config", "rbac", "breaker_client_role.yaml"), "fusebox-breaker-client")
	if err != nil {
		return err
	}
	rbac := h.cs.RbacV1()
	for _, r := range []*rbacv1.ClusterRole{manager, client} {
		if _, err := rbac.ClusterRoles().Create(ctx, r, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	if _, err := rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: manager.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: manager.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: operatorNamespace, Name: operatorAccount}},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	return nil
}

// bindApp creates the pods' service account in ns and binds it to fusebox-breaker-client
// there, as docs/rbac.md tells an application to.
func (h *harness) bindApp(ctx context.Context, ns string) error {
	if _, err := h.cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: appServiceAccount}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	_, err := h.cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "fusebox-breaker-client"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "fusebox-breaker-client"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: appServiceAccount}},
	}, metav1.CreateOptions{})
	return err
}

// clusterRole reads the ClusterRole of file (relative to the repository) under the name
// config/default gives it.
func clusterRole(file, name string) (*rbacv1.ClusterRole, error) {
	raw, err := os.ReadFile(filepath.Join(repoRoot, file))
	if err != nil {
		return nil, err
	}
	var r rbacv1.ClusterRole
	if err := yaml.Unmarshal(raw, &r); err != nil {
		return nil, err
	}
	r.Name = name
	return &r, nil
}

// podIdentity is the user the API server authenticates from a service account token
// mounted in pod (name, uid) of ns.
func podIdentity(ns, pod string, uid types.UID) rest.ImpersonationConfig {
	return rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + ns + ":" + appServiceAccount,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
		Extra: map[string][]string{
			"authentication.kubernetes.io/pod-name": {pod},
			"authentication.kubernetes.io/pod-uid":  {string(uid)},
		},
	}
}

// agentIdentity is the user the API server authenticates from the projected token of
// node n's agent pod: service account fusebox-node, with the node and pod extras of a
// token bound to a pod on a node. The agent learns its Node's UID from them
// (SelfSubjectReview) and the admission policy judges its reports by them.
func agentIdentity(base *rest.Config, n HostNode) *rest.Config {
	c := rest.CopyConfig(base)
	c.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + operatorNamespace + ":" + nodeAgentAccount,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + operatorNamespace, "system:authenticated"},
		Extra: map[string][]string{
			"authentication.kubernetes.io/node-name": {n.Name},
			"authentication.kubernetes.io/node-uid":  {n.UID},
			"authentication.kubernetes.io/pod-name":  {n.AgentPod},
			"authentication.kubernetes.io/pod-uid":   {n.AgentPodUID},
		},
	}
	// Its own connections, as a process of its own would have (see Host.podConfig).
	c.Proxy = func(*http.Request) (*url.URL, error) { return nil, nil }
	return c
}

// operatorKubeconfig writes a copy of the administrator's kubeconfig at path that
// impersonates the operator's service account, for the manager binary.
func operatorKubeconfig(admin, path string) error {
	cfg, err := clientcmd.LoadFromFile(admin)
	if err != nil {
		return err
	}
	for _, a := range cfg.AuthInfos {
		a.Impersonate = "system:serviceaccount:" + operatorNamespace + ":" + operatorAccount
		a.ImpersonateGroups = []string{"system:serviceaccounts", "system:serviceaccounts:" + operatorNamespace, "system:authenticated"}
	}
	return clientcmd.WriteToFile(*cfg, path)
}
