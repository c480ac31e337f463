package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/fusebox-dev/fusebox/internal/localcluster"
	"github.com/fusebox-dev/fusebox/internal/nodeagent"
)

// BenchmarkNodeReportWrite: what one write of a node's report costs the API server, the
// figure the fleet incident's CPU is made of (docs/benchmarks.md, "Through node
// agents"). A NodeBreakerReport of P pods with 2 breakers each, shaped as the agent
// writes it, is written by its node's agent's identity (the admission policy judging
// it) with one pod's entry changed each time: by server-side apply of the whole object;
// by an update (PUT) of the whole object, as the agent writes (internal/nodeagent,
// writer.go); by a JSON patch of that one entry. Besides ns/op it reports the API server's
// CPU per write (`apiserver-cpu-ms/op`, /proc), the object's size as stored and, of that,
// its managedFields'. With FLEET_PROFILE set to a directory it also keeps a CPU profile
// of the API server over each sub-benchmark (write-pods=P-how-apiserver.pprof), which
// says where a write's CPU goes.
//
//	KUBEBUILDER_ASSETS="$(hack/envtest.sh)" go test -run '^$' -bench NodeReportWrite -benchtime 100x -count 3 ./test/fleet
func BenchmarkNodeReportWrite(b *testing.B) {
	cluster, err := localcluster.Start(repoRoot, filepath.Join(b.TempDir(), "kubeconfig"))
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cluster.Stop() }()
	ctx := context.Background()
	h := &harness{t: b, ctx: ctx, cfg: cluster.Config, s: settings{profile: os.Getenv("FLEET_PROFILE")}}
	if h.cs, err = kubernetes.NewForConfig(cluster.Config); err != nil {
		b.Fatal(err)
	}
	if h.hc, err = rest.HTTPClientFor(cluster.Config); err != nil {
		b.Fatal(err)
	}
	if _, err := h.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	if _, err := h.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	h.nodes = 1
	if err := h.createNodes(1); err != nil {
		b.Fatal(err)
	}
	// The agent's role has no patch (it creates and updates); the comparison's server-side
	// applies and JSON patches need it.
	if _, err := h.cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-node-report-patch"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{nodeBreakerReportsGVR.Group}, Resources: []string{nodeBreakerReportsGVR.Resource}, Verbs: []string{"patch"}}},
	}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	if _, err := h.cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-node-report-patch"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "bench-node-report-patch"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: operatorNamespace, Name: nodeAgentAccount}},
	}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	node := h.nodeObjs[0]
	agent := agentIdentity(cluster.Config, node)
	agent.QPS, agent.Burst = -1, 0
	dc, err := dynamic.NewForConfig(agent)
	if err != nil {
		b.Fatal(err)
	}
	reports := dc.Resource(nodeBreakerReportsGVR).Namespace(namespace)
	apiPID := h.apiServerPID()
	if apiPID == 0 {
		b.Fatal("the API server's process is not found")
	}

	for _, pods := range []int{10, 100} {
		obj := nodeReport(node, pods)
		for _, how := range []string{"apply", "update", "jsonpatch"} {
			b.Run(fmt.Sprintf("pods=%d/%s", pods, how), func(b *testing.B) {
				_ = reports.Delete(ctx, node.Name, metav1.DeleteOptions{})
				stored, err := writeReport(ctx, reports, "apply", obj, 0, nil)
				if err != nil {
					b.Fatal(err)
				}
				// The profile covers the first 10 s of the writes, which run longer than
				// that at 100 pods with -benchtime 20x or more.
				profiled := h.profile(fmt.Sprintf("write-pods=%d-%s", pods, how), 10*time.Second)
				cpu0, _ := cpuSeconds(apiPID)
				for i := 0; b.Loop(); i++ {
					if stored, err = writeReport(ctx, reports, how, obj, i, stored); err != nil {
						b.Fatal(err)
					}
				}
				cpu1, _ := cpuSeconds(apiPID)
				profiled()
				b.ReportMetric((cpu1-cpu0)*1000/float64(b.N), "apiserver-cpu-ms/op")
				raw, _ := json.Marshal(stored.Object)
				b.ReportMetric(float64(len(raw)), "stored-B")
				mf, _ := json.Marshal(stored.GetManagedFields())
				b.ReportMetric(float64(len(mf)), "managedFields-B")
			})
		}
	}
}

// nodeReport is the report of node with pods pods, each running the fleet's two
// breakers, as the agent writes it.
func nodeReport(node HostNode, pods int) map[string]any {
	since := time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)
	lines := make([]any, pods)
	for i := range lines {
		lines[i] = map[string]any{
			"name": "app-" + strconv.Itoa(i), "uid": fmt.Sprintf("00000000-0000-0000-0000-%012d", i),
			"breakers": []any{
				entry("fleet", "Closed", "Started", since, 0),
				entry("verdict", "Closed", "ProbesSucceeded", since, 1),
			},
		}
	}
	return map[string]any{
		"apiVersion": nodeBreakerReportsGVR.GroupVersion().String(),
		"kind":       kindNodeBreakerReport,
		"metadata": map[string]any{"name": node.Name, "namespace": namespace, "ownerReferences": []any{map[string]any{
			"apiVersion": "v1", "kind": "Node", "name": node.Name, "uid": node.UID,
		}}},
		"nodeName": node.Name,
		"pods":     lines,
	}
}

func entry(name, state, reason string, since time.Time, calls int64) map[string]any {
	return map[string]any{
		"name": name, "state": state, "reason": reason, "since": since.Format("2006-01-02T15:04:05.000Z"),
		"calls": calls, "failureRatePercent": int64(0), "configGeneration": int64(1),
	}
}

// writeReport writes obj with pod i%P's verdict entry flipped between Open and Closed,
// how: apply (the whole object, server-side apply, forced, as the agent), update (the
// whole object, PUT, on the stored resourceVersion) or jsonpatch (that entry alone).
func writeReport(ctx context.Context, reports dynamic.ResourceInterface, how string, obj map[string]any, i int, stored *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	lines := obj["pods"].([]any)
	k := i % len(lines)
	state, reason := "Closed", "ProbesSucceeded"
	if (i/len(lines))%2 == 0 {
		state, reason = "Open", "Tripped"
	}
	e := entry("verdict", state, reason, time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC).Add(time.Duration(i)*time.Millisecond), int64(i))
	lines[k].(map[string]any)["breakers"].([]any)[1] = e
	name := obj["metadata"].(map[string]any)["name"].(string)
	switch how {
	case "apply":
		body, err := json.Marshal(obj)
		if err != nil {
			return nil, err
		}
		return reports.Patch(ctx, name, types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: nodeagent.FieldManager, Force: ptr.To(true)})
	case "update":
		u := &unstructured.Unstructured{Object: deepCopy(obj)}
		u.SetResourceVersion(stored.GetResourceVersion())
		return reports.Update(ctx, u, metav1.UpdateOptions{FieldManager: nodeagent.FieldManager})
	}
	body, err := json.Marshal([]any{map[string]any{"op": "replace", "path": fmt.Sprintf("/pods/%d/breakers/1", k), "value": e}})
	if err != nil {
		return nil, err
	}
	return reports.Patch(ctx, name, types.JSONPatchType, body, metav1.PatchOptions{FieldManager: nodeagent.FieldManager})
}

func deepCopy(m map[string]any) map[string]any {
	raw, _ := json.Marshal(m)
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	return out
}
