package fleet

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fusebox-dev/fusebox/internal/localcluster"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

const (
	repoRoot  = "../.."
	namespace = "fleet"
	// mainBreaker is the CircuitBreaker every scenario but the heap one uses.
	mainBreaker = "fleet"
	// quietFor is how long no counted write may be seen, and no pod may have a
	// write in flight, for the system to be called settled: longer than an
	// agent's longest retry backoff (5 s today), since a pod whose write timed
	// out writes again after it.
	quietFor = 6 * time.Second
)

type harness struct {
	t       testing.TB
	s       settings
	cluster *localcluster.Cluster
	cfg     *rest.Config // the harness's own: administrator, envtest's high QPS
	dc      dynamic.Interface
	cs      kubernetes.Interface
	hc      *http.Client
	mgr     *manager
	// What restarts the manager: its binary, kubeconfig (as the operator) and log.
	managerBin, operatorKubeconfig, managerLog string
	apiPID                                     int // the API server's process, once found
	tr                                         *tracker
	kinds                                      []string // kinds whose writes are counted

	ctx    context.Context // the harness's watches and samplers
	cancel context.CancelFunc
	tmp    string

	// pods are the fleet's pods; fleet the hosts that run them (host_test.go): this
	// process, or with FLEET_NODES the node hosts.
	pods  []HostPod
	fleet fleet
	// Node mode: how many nodes, their objects, each node host's share, and what
	// setting them up cost.
	nodes     int
	nodeObjs  []HostNode
	hostNodes [][]HostNode
	nodeNotes []string
	// watches0 are the API server's watches before any pod or agent ran.
	watches0 watches

	heapMu              sync.Mutex
	heapPeak, phasePeak float64
	heapErr             error
	// Peak resident memory (VmHWM) seen over the run, by process (memory_test.go), and
	// the processes the pods run in: the node hosts, or this one. Guarded by heapMu.
	rss      rssPeaks
	hostPIDs []int

	startUptime string
	started     time.Time

	// aborted says why the run was stopped early (memory), or is empty.
	abortMu   sync.Mutex
	aborted   string
	closeOnce sync.Once
}

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "fleet %s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, a...)...)
}

// newHarness starts the control plane and the manager, creates the namespace,
// starts counting writes and sampling the manager's heap.
func newHarness(t testing.TB, s settings) *harness {
	h := &harness{t: t, s: s, nodes: s.nodes, startUptime: uptime(), started: time.Now()}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	t.Cleanup(h.close)
	tmp := t.TempDir()
	h.tmp = tmp

	logf("starting the control plane (envtest)")
	cluster, err := localcluster.Start(repoRoot, filepath.Join(tmp, "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	h.cluster = cluster
	h.cfg = rest.CopyConfig(cluster.Config)
	if h.dc, err = dynamic.NewForConfig(h.cfg); err != nil {
		t.Fatal(err)
	}
	if h.cs, err = kubernetes.NewForConfig(h.cfg); err != nil {
		t.Fatal(err)
	}
	if h.hc, err = rest.HTTPClientFor(h.cfg); err != nil {
		t.Fatal(err)
	}

	bin := s.manager
	if bin == "" {
		logf("building the manager (go build ./cmd/manager)")
		if bin, err = buildManager(repoRoot, tmp); err != nil {
			t.Fatal(err)
		}
	}
	logPath := s.managerLog
	if logPath == "" {
		logPath = filepath.Join(tmp, "manager.log")
	}
	if err := h.installIdentities(h.ctx); err != nil {
		t.Fatal(err)
	}
	asOperator := filepath.Join(tmp, "operator.kubeconfig")
	if err := operatorKubeconfig(cluster.Kubeconfig, asOperator); err != nil {
		t.Fatal(err)
	}
	h.operatorKubeconfig, h.managerBin, h.managerLog = asOperator, bin, logPath
	if h.mgr, err = startManager(bin, asOperator, logPath, h.s.managerMemory); err != nil {
		t.Fatal(err)
	}
	logf("manager running: %s %s (log: %s)", bin, strings.Join(h.mgr.args, " "), logPath)

	if _, err := h.cs.CoreV1().Namespaces().Create(h.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := h.bindApp(h.ctx, namespace); err != nil {
		t.Fatal(err)
	}

	if h.nodes > 0 {
		logf("creating %d nodes and their agents' pods", h.nodes)
		if err := h.createNodes(h.nodes); err != nil {
			t.Fatal(err)
		}
		hosts := s.nodeHosts
		if hosts == 0 {
			hosts = defaultNodeHosts(s)
		}
		note, err := h.startNodeHosts(hosts, time.Now().Add(s.waitCap))
		if err != nil {
			t.Fatal(err)
		}
		h.nodeNotes = append(h.nodeNotes, note)
	}

	h.kinds = []string{kindCircuitBreaker, kindConfigMap}
	for _, k := range []struct {
		kind string
		gvr  schema.GroupVersionResource
	}{{kindBreakerReport, breakerReportsGVR}, {kindNodeBreakerReport, nodeBreakerReportsGVR}} {
		if h.served(k.gvr.GroupVersion().String(), k.gvr.Resource) {
			h.kinds = append(h.kinds, k.kind)
		}
	}
	h.tr = newTracker(h.kinds...)
	for _, k := range h.kinds {
		listed := make(chan struct{})
		switch k {
		case kindCircuitBreaker:
			go h.tr.watchKind(h.ctx, h.dc, circuitBreakersGVR, namespace, k, listed, logf)
		case kindConfigMap:
			go h.tr.watchKind(h.ctx, h.dc, configMapsGVR, namespace, k, listed, logf)
		case kindBreakerReport:
			go h.tr.watchKind(h.ctx, h.dc, breakerReportsGVR, namespace, k, listed, logf)
		case kindNodeBreakerReport:
			go h.tr.watchKind(h.ctx, h.dc, nodeBreakerReportsGVR, namespace, k, listed, logf)
		}
		select {
		case <-listed:
		case <-time.After(time.Minute):
			t.Fatalf("could not list %s within a minute", k)
		}
	}
	// Before any pod runs, and before a node agent has a pod to watch config for.
	h.watches0 = h.watches()
	h.apiPID = h.apiServerPID()
	h.hostPIDs = []int{os.Getpid()}
	if h.nodes > 0 {
		h.hostPIDs = h.hostPIDs[:0]
		for _, f := range h.fleet {
			h.hostPIDs = append(h.hostPIDs, f.pid())
		}
	}
	go h.sampleHeap()
	go h.guardMemory()
	return h
}

// served reports whether discovery lists resource in groupVersion.
func (h *harness) served(groupVersion, resource string) bool {
	list, err := h.cs.Discovery().ServerResourcesForGroupVersion(groupVersion)
	if err != nil {
		return false
	}
	for _, r := range list.APIResources {
		if r.Name == resource {
			return true
		}
	}
	return false
}

// close stops everything the harness started, once; the watches and samplers
// end, and every wait returns.
func (h *harness) close() { h.closeOnce.Do(h.stopAll) }

func (h *harness) stopAll() {
	h.cancel()
	var wg sync.WaitGroup
	for _, f := range h.fleet {
		wg.Go(f.close)
	}
	wg.Wait()
	if h.mgr != nil {
		h.mgr.stop()
	}
	if h.cluster != nil {
		if err := h.cluster.Stop(); err != nil {
			logf("stop control plane: %v", err)
		}
	}
}

// createPods creates the fleet's Pod objects. envtest runs no scheduler and no
// kubelet: they stay Pending, which is enough for the operator to count their
// reports. In node mode they are bound to their nodes and wired to their agents, and
// with real agents each gets its token for its node's agent.
func (h *harness) createPods(n int) {
	if h.nodes > 0 {
		dir := ""
		if !h.s.hollow {
			dir = filepath.Join(h.tmp, "tokens")
			if err := os.Mkdir(dir, 0o700); err != nil {
				h.t.Fatal(err)
			}
		}
		note, err := h.createBoundPods(n, dir)
		if err != nil {
			h.t.Fatal(err)
		}
		h.nodeNotes = append(h.nodeNotes, note)
		return
	}
	err := h.createPodObjects(namespace, n, func(i int) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("app-%d", i), Labels: map[string]string{"app": "fleet"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
		}
	})
	if err != nil {
		h.t.Fatalf("create pods: %v", err)
	}
	if err := h.listPods(n); err != nil {
		h.t.Fatal(err)
	}
}

// listPods reads the UIDs of the fleet's n pods, app-0 to app-(n-1), into h.pods, a
// page of 5,000 at a time (100,000 pods in one answer would be a few hundred MB).
func (h *harness) listPods(n int) error {
	uids := map[string]types.UID{}
	opts := metav1.ListOptions{Limit: 5000}
	for {
		list, err := h.cs.CoreV1().Pods(namespace).List(h.ctx, opts)
		if err != nil {
			return fmt.Errorf("list pods: %w", err)
		}
		for _, p := range list.Items {
			uids[p.Name] = p.UID
		}
		if opts.Continue = list.Continue; opts.Continue == "" {
			break
		}
	}
	for i := range n {
		name := fmt.Sprintf("app-%d", i)
		if uids[name] == "" {
			return fmt.Errorf("pod %s was not created", name)
		}
		h.pods = append(h.pods, HostPod{Index: i, Name: name, UID: string(uids[name])})
	}
	return nil
}

// createPodObjects creates n pods in ns, 16 at a time.
func (h *harness) createPodObjects(ns string, n int, mk func(i int) *corev1.Pod) error {
	return parallel(n, func(i int) error {
		_, err := h.cs.CoreV1().Pods(ns).Create(h.ctx, mk(i), metav1.CreateOptions{})
		return err
	})
}

// startAgents starts every pod's agent and has each use the named breakers: in this
// process, or in node mode in the node hosts, wired to their nodes' agents.
func (h *harness) startAgents(breakers ...string) {
	if h.nodes == 0 {
		h.fleet = fleet{localHost{newHost(h.cluster.Config)}}
	}
	shares := h.hostPodsOf()
	took := make([]time.Duration, len(h.fleet))
	if err := h.fleet.each("StartPods", func(i int) any {
		return StartPodsArgs{Namespace: namespace, Pods: shares[i], Breakers: breakers}
	}, func(i int) any { return &took[i] }); err != nil {
		h.t.Fatal(err)
	}
}

// breakerObject is a CircuitBreaker as the scenarios want it: open for 1 s, one
// probe at a time, closed again by one success (docs/design.md §3).
func breakerObject(name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": circuitBreakersGVR.GroupVersion().String(),
		"kind":       kindCircuitBreaker,
		"metadata":   map[string]any{"name": name, "namespace": namespace},
		"spec": map[string]any{
			"openTimeout":            "1s",
			"successThreshold":       int64(1),
			"halfOpenPermittedCalls": int64(1),
			"failureRatePercent":     int64(50),
			"mode":                   "Enforce",
			"scope":                  "Pod",
		},
	}}
}

func (h *harness) createBreaker(name string) error {
	_, err := h.dc.Resource(circuitBreakersGVR).Namespace(namespace).Create(h.ctx, breakerObject(name), metav1.CreateOptions{})
	return err
}

func (h *harness) patchSpec(name, patch string) error {
	_, err := h.dc.Resource(circuitBreakersGVR).Namespace(namespace).Patch(h.ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// waitPublished waits until the ConfigMap carries every named breaker.
func (h *harness) waitPublished(names []string, deadline time.Time) error {
	for {
		cm, err := h.cs.CoreV1().ConfigMaps(namespace).Get(h.ctx, breakerconfig.ConfigMapName, metav1.GetOptions{})
		missing := 0
		if err == nil {
			for _, n := range names {
				if _, ok := cm.Data[n+".json"]; !ok {
					missing++
				}
			}
		}
		if err == nil && missing == 0 {
			return nil
		}
		if time.Now().After(deadline) || h.ctx.Err() != nil {
			if err != nil {
				return err
			}
			return fmt.Errorf("%d of %d breakers not published", missing, len(names))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// settle waits until no counted write has been seen, and no pod has had a
// write in flight (nor, in node mode, a pod or an agent a change waiting), for quietFor (at most settleCap), so the next sample starts
// on a quiet system; it returns a note.
func (h *harness) settle(what string) string {
	start := time.Now()
	if h.tr.quiet(h.ctx, quietFor, start.Add(h.s.settleCap), h.busy) {
		d := time.Since(start)
		logf("settled after %s in %s", what, d.Round(time.Millisecond))
		return fmt.Sprintf("quiet %s after %s", fmtDur(d), what)
	}
	logf("NOT settled after %s within %s", what, h.s.settleCap)
	return fmt.Sprintf("still writing %s after %s (settle cap)", fmtDur(h.s.settleCap), what)
}

func uptime() string {
	out, err := exec.Command("uptime").Output()
	if err != nil {
		b, _ := os.ReadFile("/proc/loadavg")
		return "loadavg " + strings.TrimSpace(string(b))
	}
	return strings.TrimSpace(string(out))
}

// Figures.

func fmtDur(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(10 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// percentile is the nearest-rank percentile of ds (p in (0, 1]).
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func mib(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }

func kib(b int) string { return fmt.Sprintf("%.1f KiB", float64(b)/1024) }
