package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/counting"
	"github.com/fusebox-dev/fusebox/internal/localcluster"
	"github.com/fusebox-dev/fusebox/internal/nodeagent"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// writeCostPods is the node BenchmarkNodeReportWrite writes the report of: 100 pods, about
// a full node (the kubelet's maxPods is 110 by default), each running the fleet's two
// breakers.
const writeCostPods = 100

// writeBatch is how many writes one CPU sample spans: /proc counts CPU time in ticks of
// 10 ms, more than one write of a node's counts costs.
const writeBatch = 20

// BenchmarkNodeReportWrite: what one write of a node's report costs the API server, the
// unit an incident's CPU is made of (docs/design.md §9; docs/benchmarks.md). The
// NodeBreakerReport of a node of writeCostPods pods running two breakers each is built as
// the agent builds it (counting.Node over the pods' lines) and written as the agent
// writes it (internal/nodeagent, writer.go: an update of the whole object on the
// resourceVersion last written, field manager fusebox-node), under the node's agent
// identity with the admission policy judging it. Each write flips one pod's verdict
// breaker between Open (Tripped) and Closed (ProbesSucceeded), so that every write
// changes the entry's counts (`counts`). Beside it, `no-entries` writes the same object
// with no entries at all, one annotation changed per write: what the API server charges
// for any write of a node report on this resource, identity and policy, whatever it
// carries, the floor of what an incident's writes can cost. Besides ns/op each reports
// the object's size as stored, managedFields included (`stored-B`, `managedFields-B`),
// and the API server's CPU per write, the median over samples of writeBatch writes
// (`apiserver-cpu-ms/op`, /proc). With FLEET_PROFILE set to a directory it keeps a CPU
// profile of the API server over the first 10 s of each case's writes
// (write-counts-apiserver.pprof, write-no-entries-apiserver.pprof).
//
//	KUBEBUILDER_ASSETS="$(hack/envtest.sh)" go test -run '^$' -bench NodeReportWrite -benchtime 400x ./test/fleet
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
	for _, ns := range []string{operatorNamespace, namespace} {
		if _, err := h.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	h.nodes = 1
	if err := h.createNodes(1); err != nil {
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

	lines := podLines(writeCostPods)
	obj, err := nodeReportObject(node, lines)
	if err != nil {
		b.Fatal(err)
	}
	stored, err := reports.Create(ctx, obj, metav1.CreateOptions{FieldManager: nodeagent.FieldManager})
	if err != nil {
		b.Fatal(err)
	}
	write := func(b *testing.B, name string, next func(i int) (*unstructured.Unstructured, error)) {
		profiled := h.profile("write-"+name, 10*time.Second)
		var perWrite []float64
		cpu0, _ := cpuSeconds(apiPID)
		for i := 0; b.Loop(); i++ {
			obj, err := next(i)
			if err != nil {
				b.Fatal(err)
			}
			obj.SetResourceVersion(stored.GetResourceVersion())
			if stored, err = reports.Update(ctx, obj, metav1.UpdateOptions{FieldManager: nodeagent.FieldManager}); err != nil {
				b.Fatal(err)
			}
			if (i+1)%writeBatch == 0 {
				cpu1, _ := cpuSeconds(apiPID)
				perWrite = append(perWrite, (cpu1-cpu0)*1000/writeBatch)
				cpu0 = cpu1
			}
		}
		profiled()
		if len(perWrite) == 0 {
			b.Fatalf("fewer than %d writes: run with -benchtime %dx or more", writeBatch, 10*writeBatch)
		}
		slices.Sort(perWrite)
		b.ReportMetric(perWrite[(len(perWrite)-1)/2], "apiserver-cpu-ms/op")
		raw, _ := json.Marshal(stored.Object)
		b.ReportMetric(float64(len(raw)), "stored-B")
		mf, _ := json.Marshal(stored.GetManagedFields())
		b.ReportMetric(float64(len(mf)), "managedFields-B")
	}
	b.Run("counts", func(b *testing.B) {
		write(b, "counts", func(i int) (*unstructured.Unstructured, error) {
			flip(lines, i)
			return nodeReportObject(node, lines)
		})
	})
	b.Run("no-entries", func(b *testing.B) {
		write(b, "no-entries", func(i int) (*unstructured.Unstructured, error) {
			obj, err := nodeReportObject(node, nil)
			if err == nil {
				obj.SetAnnotations(map[string]string{"fusebox.dev/benchmark-write": strconv.Itoa(i)})
			}
			return obj, err
		})
	})
}

// podLines are the lines of n pods as the agent keeps them: each pod running the fleet's
// two breakers, closed.
func podLines(n int) []counting.PodLine {
	since := breakerconfig.NewTime(time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC))
	lines := make([]counting.PodLine, n)
	for i := range lines {
		lines[i] = counting.PodLine{
			Name: fmt.Sprintf("app-%d", i), UID: types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", i)),
			Entries: []breakerconfig.ReportEntry{
				startedEntry(mainBreaker, since.Time, 1),
				probed(startedEntry(verdictBreaker, since.Time, 1), since.Time),
			},
		}
	}
	return lines
}

// flip moves write i's pod's verdict breaker: the pods open one by one, then close one by
// one.
func flip(lines []counting.PodLine, i int) {
	k := i % len(lines)
	at := time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Millisecond)
	e := &lines[k].Entries[1]
	if (i/len(lines))%2 == 0 {
		*e = tripped(*e, at, time.Minute)
	} else {
		*e = probed(*e, at)
	}
}

// nodeReportObject is node's report of lines, as the agent writes it (writer.go).
func nodeReportObject(node HostNode, lines []counting.PodLine) (*unstructured.Unstructured, error) {
	obj := &resiliencev1alpha1.NodeBreakerReport{
		TypeMeta: metav1.TypeMeta{APIVersion: nodeBreakerReportsGVR.GroupVersion().String(), Kind: kindNodeBreakerReport},
		ObjectMeta: metav1.ObjectMeta{
			Name: node.Name, Namespace: namespace,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: types.UID(node.UID)}},
		},
		NodeName: node.Name,
		Breakers: counting.Node(lines),
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: m}, nil
}
