package kube_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/testenv"
	"github.com/fusebox-dev/fusebox/internal/testutil"
	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakertest"
	"github.com/fusebox-dev/fusebox/pkg/breaker/kube"
	"github.com/fusebox-dev/fusebox/pkg/breaker/registry"
)

// The envtest control plane every test of this package shares; each test works in its
// own namespace.
var (
	testEnv   *envtest.Environment
	cfg       *rest.Config
	k8sClient client.Client // direct, uncached: assertions see the API server itself
	envErr    error         // why the control plane did not start
	scheme    = runtime.NewScheme()
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	// Every parallel test here waits on the API server and on the agents' timers.
	testutil.WaitingParallelism(8)
	// controller-runtime's client is the tests' only; its log is not theirs to read.
	ctrllog.SetLogger(logr.Discard())
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(resiliencev1alpha1.AddToScheme(scheme))
	utilruntime.Must(apiextensionsv1.AddToScheme(scheme))
	certDir, err := os.MkdirTemp("", "fusebox-kube-envtest-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(certDir)
	if testEnv, envErr = testenv.New("../.."); envErr == nil {
		// A certificate directory of our own survives APIServer.Stop, so the outage test
		// can restart the API server on the same port with the same serving certificate,
		// and the rest.Config every instance holds stays valid.
		api := testEnv.ControlPlane.GetAPIServer()
		api.CertDir = certDir
		// A graceful stop of kube-apiserver can take the whole 20s default; past this it is
		// killed, which is what the outage test wants anyway.
		testEnv.ControlPlaneStopTimeout = 3 * time.Second
		cfg, envErr = testenv.Start(testEnv)
	}
	if envErr == nil {
		defer func() { _ = testEnv.Stop() }()
		k8sClient, envErr = client.New(cfg, client.Options{Scheme: scheme})
	}
	if envErr == nil {
		// The API server's own check of which report a pod may write, as deployed.
		envErr = testenv.InstallPolicies(cfg, "../..")
	}
	if envErr != nil {
		fmt.Fprintf(os.Stderr, "\n*** envtest control plane not started: %v\n*** the tests that need it fail\n\n", envErr)
	}
	return m.Run()
}

// needEnv fails a test that needs the control plane when there is none.
func needEnv(t *testing.T) {
	t.Helper()
	if envErr != nil {
		t.Fatalf("envtest control plane not started (run `make envtest` or hack/envtest.sh): %v", envErr)
	}
}

func newFakeClock() *breakertest.Clock {
	return breakertest.NewClock(time.Now().UTC().Truncate(time.Second))
}

// testPolicy opens after two calls of which half failed, and stays open 30s.
func testPolicy() breaker.Policy {
	p := breaker.DefaultPolicy()
	p.MinimumThroughput = 2
	return p
}

// newNamespace creates a namespace for one test.
func newNamespace(t *testing.T) string {
	t.Helper()
	needEnv(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "kube-"}}
	if err := k8sClient.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// createBreaker creates the CircuitBreaker name; the operator does not run in this suite,
// so its spec matters to nobody: the ConfigMap the tests write is what pods read.
func createBreaker(t *testing.T, ns, name string) {
	t.Helper()
	cb := &resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := k8sClient.Create(context.Background(), cb); err != nil {
		t.Fatal(err)
	}
}

// render is the published document of a breaker, as the operator writes it.
func render(t *testing.T, name string, gen int64, p breaker.Policy, scope string, verdict *breakerconfig.Verdict) string {
	t.Helper()
	c := kube.ConfigOf(name, gen, p, scope)
	c.Verdict = verdict
	b, err := breakerconfig.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// writeConfigMap creates or replaces the namespace's fusebox-breakers ConfigMap.
func writeConfigMap(t *testing.T, ns string, data map[string]string) {
	t.Helper()
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: breakerconfig.ConfigMapName}}
	err := k8sClient.Get(ctx, client.ObjectKeyFromObject(cm), cm)
	switch {
	case apierrors.IsNotFound(err):
		cm.Data = data
		err = k8sClient.Create(ctx, cm)
	case err == nil:
		cm.Data = data
		err = k8sClient.Update(ctx, cm)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// reportOf returns the BreakerReport of pod and its entries by breaker name.
func reportOf(ns, pod string) (*resiliencev1alpha1.BreakerReport, map[string]resiliencev1alpha1.BreakerReportEntry, error) {
	var r resiliencev1alpha1.BreakerReport
	if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: pod}, &r); err != nil {
		return nil, nil, err
	}
	out := map[string]resiliencev1alpha1.BreakerReportEntry{}
	for _, e := range r.Breakers {
		out[e.Name] = e
	}
	return &r, out, nil
}

// eventually polls f until it returns nil, and fails the test with f's last error when
// timeout passes first. API propagation takes time; breaker time never does here (the
// breakers run on fake clocks).
func eventually(t *testing.T, timeout time.Duration, f func() error) {
	t.Helper()
	testutil.Eventually(t, timeout, "condition", f)
}

// instance is one in-process "pod": an agent with its own pod name and API connection.
type instance struct {
	pod    string
	uid    types.UID // of its Pod object; empty with noPod
	agent  *kube.Connection
	reg    *registry.Registry
	cancel context.CancelFunc
	// mutations counts the mutating requests this instance sent to the API server.
	mutations *atomic.Int64
	logs      *syncBuffer
}

type instanceOptions struct {
	clock    *breakertest.Clock
	breakers []string // created with Registry.Get right after start, as an application would
	// noPod leaves the Pod object out: envtest has no kubelet, so the tests create the
	// Pod a real agent runs in, which the agent reads for its UID.
	noPod bool
	// passUID gives the agent its Pod's UID in Options.PodUID (the downward API's
	// POD_UID), so that it need not read its Pod.
	passUID bool
	modify  func(*kube.Options)
}

// createPod creates the Pod object of an instance, as the kubelet would have, and returns
// its UID.
func createPod(t *testing.T, ns, pod string) types.UID {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	if err := k8sClient.Create(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	return p.UID
}

// startInstance starts an agent for pod in ns, after creating its Pod unless told not to.
// It stops when the test ends.
func startInstance(t *testing.T, ns, pod string, opt instanceOptions) *instance {
	t.Helper()
	in := &instance{pod: pod, mutations: new(atomic.Int64), logs: new(syncBuffer)}
	if !opt.noPod {
		in.uid = createPod(t, ns, pod)
	}
	c := rest.CopyConfig(cfg)
	c.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return &countingTransport{rt: rt, mutations: in.mutations}
	}
	o := kube.Options{
		Config:        c,
		Namespace:     ns,
		Pod:           pod,
		DefaultPolicy: breaker.DefaultPolicy(),
		Logger:        slog.New(slog.NewTextHandler(logWriter(t, in.logs), &slog.HandlerOptions{Level: slog.LevelDebug})).With("pod", pod),
	}
	if opt.passUID {
		o.PodUID = string(in.uid)
	}
	if opt.clock != nil {
		o.BreakerOptions = append(o.BreakerOptions, breaker.WithClock(opt.clock))
	}
	if opt.modify != nil {
		opt.modify(&o)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a, err := kube.Connect(ctx, o)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	in.agent, in.reg, in.cancel = a, a.Registry(), cancel
	for _, b := range opt.breakers {
		in.reg.Get(b)
	}
	t.Cleanup(func() {
		cancel()
		select {
		case <-a.Done():
		case <-time.After(10 * time.Second):
			t.Errorf("instance %s: agent still running 10s after cancel", pod)
		}
	})
	return in
}

// logWriter sends an instance's log to its buffer, and to the test log with -v.
func logWriter(t *testing.T, buf *syncBuffer) io.Writer {
	if testing.Verbose() {
		return io.MultiWriter(buf, tWriter{t})
	}
	return buf
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// syncBuffer is written by a running agent's logger while the test reads it.
type syncBuffer = testutil.SyncBuffer

// countingTransport counts mutating requests on their way to the API server.
type countingTransport struct {
	rt        http.RoundTripper
	mutations *atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
	default:
		c.mutations.Add(1)
	}
	return c.rt.RoundTrip(r)
}

func (c *countingTransport) WrappedRoundTripper() http.RoundTripper { return c.rt }

// policyIs checks that every instance's breaker name runs p.
func policyIs(ins []*instance, name string, p breaker.Policy) error {
	if p.Mode == "" {
		p.Mode = breaker.ModeEnforce
	}
	for _, in := range ins {
		if got := in.reg.Get(name).Policy(); got != p {
			return fmt.Errorf("pod %s: breaker %s runs %+v, want %+v", in.pod, name, got, p)
		}
	}
	return nil
}

// memberIs checks the entry of breaker name in pod's BreakerReport.
func memberIs(ns, name, pod string, check func(resiliencev1alpha1.BreakerReportEntry) error) error {
	_, es, err := reportOf(ns, pod)
	if err != nil {
		return fmt.Errorf("report of pod %s: %w", pod, err)
	}
	e, ok := es[name]
	if !ok {
		return fmt.Errorf("pod %s reports no entry for %s yet (has %d)", pod, name, len(es))
	}
	if err := check(e); err != nil {
		return fmt.Errorf("pod %s: %s: %w (entry %+v)", pod, name, err, e)
	}
	return nil
}

// wantEntry checks the state and config generation of an entry.
func wantEntry(state resiliencev1alpha1.State, gen int64) func(resiliencev1alpha1.BreakerReportEntry) error {
	return func(e resiliencev1alpha1.BreakerReportEntry) error {
		if e.State != state || e.ConfigGeneration != gen {
			return fmt.Errorf("state %s generation %d, want %s generation %d", e.State, e.ConfigGeneration, state, gen)
		}
		return nil
	}
}

// wantReason checks the state and reason of an entry.
func wantReason(state resiliencev1alpha1.State, reason string) func(resiliencev1alpha1.BreakerReportEntry) error {
	return func(e resiliencev1alpha1.BreakerReportEntry) error {
		if e.State != state || e.Reason != reason {
			return fmt.Errorf("state %s reason %s, want %s %s", e.State, e.Reason, state, reason)
		}
		return nil
	}
}

// idle waits until the agent's writer has nothing left to write: the report it wants is
// the one the API server accepted. Its Writes count is then complete: the counter moves
// just after the server answers, so a test that has read the new report may otherwise
// read the count before it moves.
func idle(t *testing.T, a *kube.Connection) {
	t.Helper()
	eventually(t, propagation, func() error {
		if !a.ReportWritten() {
			return fmt.Errorf("the writer is still busy (stats %+v)", a.Stats())
		}
		return nil
	})
}
