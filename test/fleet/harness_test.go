package fleet

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fusebox-dev/fusebox/internal/localcluster"
	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/kube"
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

// pod is one in-process application pod: a Pod object and an agent.
type pod struct {
	name  string
	uid   types.UID
	agent *kube.Agent
}

func (p *pod) breaker(name string) *breaker.Breaker { return p.agent.Registry().Get(name) }

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

	agentCtx  context.Context
	agentStop context.CancelFunc
	pods      []*pod

	// Client-side counts of the agents' requests to the API server.
	podWrites, podWriteErrors atomic.Int64
	// podWritesInFlight is the agents' writes sent and not answered yet;
	// podWriteEnded the Unix nanoseconds of the last answer.
	podWritesInFlight, podWriteEnded atomic.Int64

	heapMu              sync.Mutex
	heapPeak, phasePeak float64
	heapErr             error

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
	h := &harness{t: t, s: s, startUptime: uptime(), started: time.Now()}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	t.Cleanup(h.close)
	tmp := t.TempDir()

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
	if h.mgr, err = startManager(bin, asOperator, logPath); err != nil {
		t.Fatal(err)
	}
	logf("manager running: %s %s (log: %s)", bin, strings.Join(h.mgr.args, " "), logPath)

	if _, err := h.cs.CoreV1().Namespaces().Create(h.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := h.bindApp(h.ctx, namespace); err != nil {
		t.Fatal(err)
	}

	h.kinds = []string{kindCircuitBreaker, kindConfigMap}
	if h.served(breakerReportsGVR.GroupVersion().String(), breakerReportsGVR.Resource) {
		h.kinds = append(h.kinds, kindBreakerReport)
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
		}
		select {
		case <-listed:
		case <-time.After(time.Minute):
			t.Fatalf("could not list %s within a minute", k)
		}
	}
	h.agentCtx, h.agentStop = context.WithCancel(context.Background())
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
	if h.agentStop != nil {
		h.agentStop()
		deadline := time.After(30 * time.Second)
	wait:
		for _, p := range h.pods {
			select {
			case <-p.agent.Done():
			case <-deadline:
				logf("agents still running 30 s after being stopped; going on")
				break wait
			}
		}
	}
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
// reports.
func (h *harness) createPods(n int) {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("app-%d", i)
	}
	err := h.createPodObjects(namespace, n, func(i int) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: names[i], Labels: map[string]string{"app": "fleet"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
		}
	})
	if err != nil {
		h.t.Fatalf("create pods: %v", err)
	}
	list, err := h.cs.CoreV1().Pods(namespace).List(h.ctx, metav1.ListOptions{})
	if err != nil {
		h.t.Fatalf("list pods: %v", err)
	}
	uids := map[string]types.UID{}
	for _, p := range list.Items {
		uids[p.Name] = p.UID
	}
	for _, name := range names {
		h.pods = append(h.pods, &pod{name: name, uid: uids[name]})
	}
}

// createPodObjects creates n pods in ns, 16 at a time.
func (h *harness) createPodObjects(ns string, n int, mk func(i int) *corev1.Pod) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		next atomic.Int64
	)
	for range 16 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if _, err := h.cs.CoreV1().Pods(ns).Create(h.ctx, mk(i), metav1.CreateOptions{}); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return fmt.Errorf("%d of %d failed, first: %w", len(errs), n, errs[0])
	}
	return nil
}

// countingTransport counts an agent's writes (every request but GET and HEAD)
// and the ones that failed.
type countingTransport struct {
	next http.RoundTripper
	h    *harness
}

func (c countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return c.next.RoundTrip(r)
	}
	c.h.podWritesInFlight.Add(1)
	resp, err := c.next.RoundTrip(r)
	c.h.podWriteEnded.Store(time.Now().UnixNano())
	c.h.podWritesInFlight.Add(-1)
	c.h.podWrites.Add(1)
	if err != nil || resp.StatusCode >= 400 {
		c.h.podWriteErrors.Add(1)
	}
	return resp, err
}

// WrappedRoundTripper lets client-go reach the transport underneath, to close
// the agent's idle connections when it stops.
func (c countingTransport) WrappedRoundTripper() http.RoundTripper { return c.next }

// agentConfig is one pod's rest.Config: its own copy, under the pod's own
// identity (identity_test.go), at client-go's default rate limits as
// rest.InClusterConfig gives a real pod (5 QPS, burst 10), and with its own
// connections: a Proxy func keeps client-go from sharing one cached transport
// between the agents, as separate processes would not.
func (h *harness) agentConfig(p *pod) *rest.Config {
	c := rest.CopyConfig(h.cluster.Config)
	c.Impersonate = podIdentity(namespace, p.name, p.uid)
	c.QPS, c.Burst = 0, 0
	c.Proxy = func(*http.Request) (*url.URL, error) { return nil, nil }
	c.Wrap(func(rt http.RoundTripper) http.RoundTripper { return countingTransport{next: rt, h: h} })
	return c
}

// startAgents starts every pod's agent and has each use the named breakers.
func (h *harness) startAgents(breakers ...string) {
	quiet := slog.New(slog.DiscardHandler)
	for _, p := range h.pods {
		a, err := kube.StartAgent(h.agentCtx, kube.Options{
			Config:    h.agentConfig(p),
			Namespace: namespace,
			Pod:       p.name,
			PodUID:    string(p.uid),
			Logger:    quiet,
		})
		if err != nil {
			h.t.Fatalf("start agent of %s: %v", p.name, err)
		}
		p.agent = a
		for _, b := range breakers {
			a.Registry().Get(b)
		}
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
// write in flight, for quietFor (at most settleCap), so the next sample starts
// on a quiet system; it returns a note.
func (h *harness) settle(what string) string {
	start := time.Now()
	busy := func() time.Time {
		if h.podWritesInFlight.Load() > 0 {
			return time.Now()
		}
		return time.Unix(0, h.podWriteEnded.Load())
	}
	if h.tr.quiet(h.ctx, quietFor, start.Add(h.s.settleCap), busy) {
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
