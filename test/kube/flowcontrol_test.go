package kube_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/testenv"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// The headers in which kube-apiserver names the FlowSchema and the priority level that
// classified a request.
const (
	flowSchemaHeader    = "X-Kubernetes-PF-FlowSchema-UID"
	priorityLevelHeader = "X-Kubernetes-PF-PriorityLevel-UID"
)

// classification records where the API server filed the last request sent through it.
type classification struct {
	rt http.RoundTripper

	mu                        sync.Mutex
	flowSchema, priorityLevel types.UID
}

func (c *classification) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.rt.RoundTrip(r)
	if err == nil {
		c.mu.Lock()
		c.flowSchema = types.UID(resp.Header.Get(flowSchemaHeader))
		c.priorityLevel = types.UID(resp.Header.Get(priorityLevelHeader))
		c.mu.Unlock()
	}
	return resp, err
}

func (c *classification) last() (types.UID, types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.flowSchema, c.priorityLevel
}

// classifiedClientAs returns a client impersonating user and what the API server made of its last
// request.
func classifiedClientAs(t *testing.T, user rest.ImpersonationConfig) (client.Client, *classification) {
	t.Helper()
	c := rest.CopyConfig(cfg)
	c.Impersonate = user
	seen := &classification{}
	c.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { seen.rt = rt; return seen }
	cl, err := client.New(c, client.Options{Scheme: scheme})
	must(t, err)
	return cl, seen
}

// TestFlowControlFilesReportsApartFromTheOperator: with config/flowcontrol applied
// server-side, a pod's BreakerReport write and a node agent's TokenReview are filed
// under the reports' bounded priority level and the operator's status write under its
// own, so the operator never queues behind a storm of reports (docs/rbac.md, "Priority
// and fairness").
func TestFlowControlFilesReportsApartFromTheOperator(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	must(t, testenv.InstallFlowControl(cfg, "../.."))
	level := func(name string) (schema, pl types.UID) {
		var fs flowcontrolv1.FlowSchema
		must(t, k8sClient.Get(ctx, client.ObjectKey{Name: name}, &fs))
		var plc flowcontrolv1.PriorityLevelConfiguration
		must(t, k8sClient.Get(ctx, client.ObjectKey{Name: fs.Spec.PriorityLevelConfiguration.Name}, &plc))
		return fs.UID, plc.UID
	}
	reportsSchema, reportsLevel := level("breaker-reports")
	agentsSchema, agentsLevel := level("node-agents")
	operatorSchema, operatorLevel := level("operator")
	if agentsLevel == reportsLevel || agentsLevel == operatorLevel {
		t.Fatal("the node agents, whose few large writes run best on a few seats in order, share a priority level with the pods' reports or the operator")
	}
	if reportsLevel == operatorLevel {
		t.Fatal("the operator and the pods' reports share a priority level")
	}
	filedUnder := func(seen *classification, schema, pl types.UID) error {
		if s, l := seen.last(); s != schema || l != pl {
			return fmt.Errorf("filed under FlowSchema %q, priority level %q; want %q, %q", s, l, schema, pl)
		}
		return nil
	}

	// (a) A pod: its service account's token, bound to the pod.
	ns := newNamespace(t)
	must(t, k8sClient.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}}))
	bindBreakerClientRole(t, ns, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "app"})
	uid := createPod(t, ns, "pod-a")
	pod, seenPod := classifiedClientAs(t, rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + ns + ":app",
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
		Extra: map[string][]string{
			"authentication.kubernetes.io/pod-name": {"pod-a"},
			"authentication.kubernetes.io/pod-uid":  {string(uid)},
		},
	})
	report := &resiliencev1alpha1.BreakerReport{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: "pod-a",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "pod-a", UID: uid}},
		},
		Breakers: []resiliencev1alpha1.BreakerReportEntry{{
			Name: "cart", PodCircuit: resiliencev1alpha1.PodCircuit{State: resiliencev1alpha1.StateOpen,
				Since: metav1.NewTime(time.Now())}, Reason: breakerconfig.ReasonTripped,
		}},
	}
	must(t, pod.Create(ctx, report))
	// The API server takes up new FlowSchemas a moment after they are stored: writes
	// until it has.
	eventually(t, propagation, func() error {
		report.Breakers[0].Since = metav1.NewTime(time.Now())
		if err := pod.Update(ctx, report); err != nil {
			return err
		}
		return filedUnder(seenPod, reportsSchema, reportsLevel)
	})
	// Its reads are not reports: the defaults still file them.
	var cm corev1.ConfigMapList
	_ = pod.List(ctx, &cm, client.InNamespace(ns))
	if s, _ := seenPod.last(); s == reportsSchema || s == "" {
		t.Errorf("a pod's read was filed under FlowSchema %q, want a default schema", s)
	}

	// (b) A node agent, checking a pod's token: whether the API server lets it (the
	// answer's status) does not matter, the classification precedes authorization.
	agent, seenAgent := classifiedClientAs(t, rest.ImpersonationConfig{
		UserName: "system:serviceaccount:fusebox-system:fusebox-node",
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:fusebox-system", "system:authenticated"},
		Extra:    map[string][]string{"authentication.kubernetes.io/node-name": {"node-a"}},
	})
	eventually(t, propagation, func() error {
		_ = agent.Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: "not-a-token"}})
		return filedUnder(seenAgent, agentsSchema, agentsLevel)
	})

	// (c) The operator: its service account as config/default deploys it, with the
	// ClusterRole config/rbac gives it.
	const operator = "system:serviceaccount:fusebox-system:fusebox-controller-manager"
	raw, err := os.ReadFile("../../config/rbac/role.yaml")
	must(t, err)
	var role rbacv1.ClusterRole
	must(t, yaml.Unmarshal(raw, &role))
	role.Name = "fusebox-manager-" + ns
	must(t, k8sClient.Create(ctx, &role))
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "fusebox-system", Name: "fusebox-controller-manager"}},
	}
	must(t, k8sClient.Create(ctx, binding))
	t.Cleanup(func() {
		_ = k8sClient.Delete(context.Background(), binding)
		_ = k8sClient.Delete(context.Background(), &role)
	})
	op, seenOp := classifiedClientAs(t, rest.ImpersonationConfig{
		UserName: operator,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:fusebox-system", "system:authenticated"},
	})
	cb := &resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cart"}}
	must(t, k8sClient.Create(ctx, cb))
	eventually(t, propagation, func() error {
		var cur resiliencev1alpha1.CircuitBreaker
		if err := op.Get(ctx, client.ObjectKeyFromObject(cb), &cur); err != nil {
			return err
		}
		patch := client.MergeFrom(cur.DeepCopy())
		cur.Status.State = resiliencev1alpha1.StateOpen
		cur.Status.ObservedGeneration = cur.Generation
		if err := op.Status().Patch(ctx, &cur, patch); err != nil {
			return err
		}
		return filedUnder(seenOp, operatorSchema, operatorLevel)
	})
	// And so is its deletion of a pod's report: the operator's schema precedes the pods'.
	must(t, op.Delete(ctx, report))
	must(t, filedUnder(seenOp, operatorSchema, operatorLevel))
}
