package nodeagent

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/testenv"
	"github.com/fusebox-dev/fusebox/internal/testutil"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// The envtest control plane every test of this package shares (a real kube-apiserver and
// etcd: TokenRequest, TokenReview, SelfSubjectReview and the pod-bound tokens' node
// extras are the API server's own). Each test makes its own nodes and namespaces.
var (
	testEnv   *envtest.Environment
	cfg       *rest.Config
	k8sClient client.Client
	clientset kubernetes.Interface
	certDir   string // the API server's, holding the service-account signing key
	envErr    error
	scheme    = runtime.NewScheme()
)

// The agent's own service account, as the DaemonSet runs it.
const (
	agentNamespace = "fusebox-system"
	agentAccount   = "fusebox-node"
)

// agentRules are the agent's RBAC needs, exactly: the ClusterRole the deployment grants
// service account fusebox-node must hold these. The suite binds them and nothing else to
// the identity the agents of the tests impersonate, so a need missing here fails a test.
var agentRules = []rbacv1.PolicyRule{
	{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews", "selfsubjectreviews"}, Verbs: []string{"create"}},
	{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{breakerconfig.ConfigMapName}, Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{breakerconfig.Group}, Resources: []string{breakerconfig.NodeReportResource}, Verbs: []string{"get", "list", "watch", "create", "update", "delete"}},
}

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	ctrllog.SetLogger(logr.Discard())
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(resiliencev1alpha1.AddToScheme(scheme))
	var err error
	if certDir, err = os.MkdirTemp("", "fusebox-nodeagent-envtest-"); err != nil {
		panic(err)
	}
	defer os.RemoveAll(certDir)
	if testEnv, envErr = testenv.New("../.."); envErr == nil {
		testEnv.ControlPlane.GetAPIServer().CertDir = certDir
		cfg, envErr = testenv.Start(testEnv)
	}
	if envErr == nil {
		defer func() { _ = testEnv.Stop() }()
		k8sClient, envErr = client.New(cfg, client.Options{Scheme: scheme})
	}
	if envErr == nil {
		clientset, envErr = kubernetes.NewForConfig(cfg)
	}
	if envErr == nil {
		// The API server's own checks of who writes which report, as deployed.
		envErr = testenv.InstallPolicies(cfg, "../..")
	}
	if envErr == nil {
		envErr = grantAgent()
	}
	if envErr != nil {
		fmt.Fprintf(os.Stderr, "\n*** envtest control plane not started: %v\n*** the tests that need it fail\n\n", envErr)
	}
	return m.Run()
}

// grantAgent creates the agent's namespace and service account and binds agentRules to it.
func grantAgent() error {
	ctx := context.Background()
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentNamespace}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: agentNamespace, Name: agentAccount}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: agentNamespace, Name: breakerconfig.NodeAgentReaderName}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "fusebox-node"}, Rules: agentRules},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "fusebox-node"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "fusebox-node"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: agentNamespace, Name: agentAccount}},
		},
	} {
		if err := k8sClient.Create(ctx, o); err != nil {
			return fmt.Errorf("create %T %s: %w", o, o.GetName(), err)
		}
	}
	return nil
}

func needEnv(t testing.TB) {
	t.Helper()
	if envErr != nil {
		t.Fatalf("envtest control plane not started (run `make envtest` or hack/envtest.sh): %v", envErr)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// propagation bounds how long the API server, the watches and the agent's pacing may take
// to carry a change, on a loaded machine.
const propagation = 20 * time.Second

func eventually(t testing.TB, what string, f func() error) {
	t.Helper()
	testutil.Eventually(t, propagation, what, f)
}

func suffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// newNode creates a Node object, as a kubelet registers its node, and returns it.
func newNode(t testing.TB) *corev1.Node {
	t.Helper()
	needEnv(t)
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-" + suffix()}}
	must(t, k8sClient.Create(context.Background(), n))
	return n
}

// newNamespace creates a namespace with service account app.
func newNamespace(t testing.TB) string {
	t.Helper()
	needEnv(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "shop-"}}
	must(t, k8sClient.Create(context.Background(), ns))
	must(t, k8sClient.Create(context.Background(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "app"}}))
	return ns.Name
}

// newPod creates a pod bound to node, as the scheduler would have bound it (there is no
// kubelet: it stays Pending, which is a running pod to the agent), wired to the node's
// agent as the injection webhook wires one (FUSEBOX_NODE_AGENT in its spec), with labels.
func newPod(t testing.TB, ns, name, node string, labels ...string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: "app",
			Containers: []corev1.Container{{Name: "app", Image: "app", Env: []corev1.EnvVar{{Name: breakerconfig.EnvNodeAgent, Value: "http://10.96.0.10:8476"}}}}},
	}
	for i := 0; i+1 < len(labels); i += 2 {
		if p.Labels == nil {
			p.Labels = map[string]string{}
		}
		p.Labels[labels[i]] = labels[i+1]
	}
	must(t, k8sClient.Create(context.Background(), p))
	return p
}

// podToken is a TokenRequest for the pod's service account bound to the pod, for
// audience: what the kubelet projects into the pod. The API server adds the node's name
// and UID to a token of a pod bound to a node.
func podToken(t testing.TB, p *corev1.Pod, audience string) string {
	t.Helper()
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences:         []string{audience},
		ExpirationSeconds: ptr.To[int64](3600),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID},
	}}
	tr, err := clientset.CoreV1().ServiceAccounts(p.Namespace).CreateToken(context.Background(), p.Spec.ServiceAccountName, req, metav1.CreateOptions{})
	must(t, err)
	return tr.Status.Token
}

// agentIdentity is how the API server authenticates a real agent pod's token on node:
// service account fusebox-node, with the node and pod extras of a pod-bound token.
func agentIdentity(node *corev1.Node) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + agentNamespace + ":" + agentAccount,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + agentNamespace, "system:authenticated"},
		Extra: map[string][]string{
			extraNodeName: {node.Name},
			extraNodeUID:  {string(node.UID)},
			extraPodName:  {"fusebox-node-" + node.Name},
			extraPodUID:   {"agent-pod-" + string(node.UID)},
		},
	}
	return c
}

// runningAgent is an agent of the suite, serving on a loopback address that outlives it:
// a restart serves on the same address, as a restarted DaemonSet pod behind its Service.
type runningAgent struct {
	*Agent
	addr   string
	url    string
	stop   context.CancelFunc
	done   chan error
	writes *requestCounter // the agent's requests to the API server
}

type agentOptions struct {
	addr  string // "" picks a free port
	grace time.Duration
	clock clock.WithTicker // nil: the real clock
	port  portLimits       // zero values: the defaults
}

func startAgent(t testing.TB, node *corev1.Node, opt agentOptions) *runningAgent {
	t.Helper()
	needEnv(t)
	c := agentIdentity(node)
	counter := &requestCounter{}
	c.WrapTransport = counter.wrap
	a, err := New(Options{Config: c, NodeName: node.Name, ShutdownGrace: opt.grace, Logger: testLogger(t, node.Name), clock: opt.clock, port: opt.port})
	must(t, err)
	addr := opt.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var ln net.Listener
	// A port just closed by the previous agent may take a moment to be free again.
	eventually(t, "listen on "+addr, func() (err error) { ln, err = net.Listen("tcp", addr); return err })
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningAgent{Agent: a, addr: ln.Addr().String(), url: "http://" + ln.Addr().String(), stop: cancel, done: make(chan error, 1), writes: counter}
	go func() { r.done <- a.Run(ctx, ln) }()
	t.Cleanup(func() { r.kill(t) })
	eventually(t, "agent ready", func() error {
		if !a.Ready() {
			return fmt.Errorf("not ready")
		}
		return nil
	})
	return r
}

// kill stops the agent and waits until it has.
func (r *runningAgent) kill(t testing.TB) {
	r.stop()
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("agent: %v", err)
		}
		r.done <- nil // a second kill returns at once
	case <-time.After(30 * time.Second):
		t.Errorf("agent still running 30s after its context ended")
	}
}

func testLogger(t testing.TB, who string) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})).With("who", who)
	}
	return slog.New(slog.DiscardHandler)
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// requestCounter counts an agent's requests to the API server by what they do.
type requestCounter struct {
	mu     sync.Mutex
	counts map[string]int // "PUT nodebreakerreports ns", "WATCH configmaps ns", "409"
}

func (c *requestCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return &countingTransport{rt: rt, c: c}
}

type countingTransport struct {
	rt http.RoundTripper
	c  *requestCounter
}

func (t *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.c.add(describe(r))
	resp, err := t.rt.RoundTrip(r)
	if err == nil && resp.StatusCode == http.StatusConflict {
		t.c.add("409")
	}
	return resp, err
}

func (c *requestCounter) add(what string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts == nil {
		c.counts = map[string]int{}
	}
	c.counts[what]++
}

// WrappedRoundTripper lets client-go reach the transport beneath, to close its idle
// connections.
func (t *countingTransport) WrappedRoundTripper() http.RoundTripper { return t.rt }

// describe names a request by its verb, resource and namespace.
func describe(r *http.Request) string {
	verb := r.Method
	if r.URL.Query().Get("watch") == "true" {
		verb = "WATCH"
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	var ns, resource string
	for i := 0; i < len(parts)-1; i++ {
		if parts[i] == "namespaces" {
			ns = parts[i+1]
			if i+2 < len(parts) {
				resource = parts[i+2]
			}
		}
	}
	if resource == "" {
		resource = parts[len(parts)-1]
	}
	return strings.TrimSpace(verb + " " + resource + " " + ns)
}

func (c *requestCounter) count(what string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[what]
}

// conflicts counts the agent's requests the API server answered 409.
func (c *requestCounter) conflicts() int { return c.count("409") }

// writesTo counts the agent's writes of the node report in ns: creates, updates and
// deletes.
func (c *requestCounter) writesTo(ns string) int {
	return c.count("POST nodebreakerreports "+ns) + c.count("PUT nodebreakerreports "+ns) + c.count("DELETE nodebreakerreports "+ns)
}

// call sends a request to the agent with token ("" for none) and returns the status and
// the body.
func call(t testing.TB, method, url, token string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		switch b := body.(type) {
		case []byte:
			rd = bytes.NewReader(b)
		default:
			raw, err := json.Marshal(b)
			must(t, err)
			rd = bytes.NewReader(raw)
		}
	}
	req, err := http.NewRequest(method, url, rd)
	must(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	must(t, err)
	return resp.StatusCode, out
}

// putReport sends entries as the pod of token.
func putReport(t testing.TB, a *runningAgent, token string, entries ...breakerconfig.ReportEntry) (int, []byte) {
	t.Helper()
	if entries == nil {
		entries = []breakerconfig.ReportEntry{}
	}
	return call(t, http.MethodPut, a.url+breakerconfig.AgentReportPath, token, breakerconfig.AgentReport{Breakers: entries})
}

// nodeReport returns the node's report in ns as the API server holds it, nil if none.
func nodeReport(t testing.TB, ns, node string) *resiliencev1alpha1.NodeBreakerReport {
	t.Helper()
	var r resiliencev1alpha1.NodeBreakerReport
	err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: node}, &r)
	if apierrors.IsNotFound(err) {
		return nil
	}
	must(t, err)
	return &r
}

// entryOf returns the report's entry of breaker at revision, nil if it has none.
func entryOf(r *resiliencev1alpha1.NodeBreakerReport, breaker, revision string) *resiliencev1alpha1.NodeBreakerEntry {
	if r == nil {
		return nil
	}
	for i := range r.Breakers {
		if e := &r.Breakers[i]; e.Name == breaker && e.Revision == revision {
			return e
		}
	}
	return nil
}

// counted returns how many pods the node's report in ns counts for breaker at revision,
// and how many of them are open: 0, 0 when there is no such entry or no report.
func counted(t testing.TB, ns, node, breaker, revision string) (pods, open int32) {
	t.Helper()
	if e := entryOf(nodeReport(t, ns, node), breaker, revision); e != nil {
		return e.Pods, e.Open
	}
	return 0, 0
}

// writeTokenFile writes token where a pod reads it, and returns the path.
func writeTokenFile(t testing.TB, token string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "token")
	must(t, os.WriteFile(path, []byte(token), 0o600))
	return path
}
