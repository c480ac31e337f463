package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/nodeagent"
	"github.com/fusebox-dev/fusebox/internal/testenv"
	"github.com/fusebox-dev/fusebox/internal/testutil"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// Real node agents (internal/nodeagent) run in this process against the suite's API
// server, as their own suite runs them: under service account fusebox-node of the
// operator's namespace with the extras of a pod-bound token on their node, with the
// ClusterRole config/nodeagent ships. envtest has no kubelet, so the API server's
// pods/proxy cannot reach them: the tests give the plugin a fetcher that asks each agent
// at its loopback address, as pods/proxy would, with the reader's token in
// AgentTokenHeader. The real cluster's suite (test/cluster) goes through pods/proxy.

// fuseboxNamespace is where the tests' agents run, as the chart installs them.
const fuseboxNamespace = DefaultFuseboxNamespace

var agentSetup struct {
	once sync.Once
	err  error
}

// needAgents creates, once, the agents' namespace, their service account and its
// ClusterRole (config/nodeagent's), and the readers' service account.
func needAgents(t *testing.T) {
	t.Helper()
	needEnv(t)
	agentSetup.once.Do(func() { agentSetup.err = grantAgents() })
	if agentSetup.err != nil {
		t.Fatalf("the node agents' namespace and RBAC: %v", agentSetup.err)
	}
}

func grantAgents() error {
	ctx := context.Background()
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fuseboxNamespace}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: fuseboxNamespace, Name: "fusebox-node"}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: fuseboxNamespace, Name: breakerconfig.NodeAgentReaderName}},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "fusebox-node"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "fusebox-node"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: fuseboxNamespace, Name: "fusebox-node"}},
		},
	}
	manifests, err := testenv.ReadManifests(filepath.Join("..", "..", "config", "nodeagent"))
	if err != nil {
		return err
	}
	for _, u := range manifests {
		if u.GetKind() != "ClusterRole" {
			continue
		}
		var role rbacv1.ClusterRole
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &role); err != nil {
			return err
		}
		// config/default adds the fusebox- prefix.
		objs = append(objs, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "fusebox-" + role.Name}, Rules: role.Rules})
	}
	for _, o := range objs {
		if err := k8sClient.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create %T %s: %w", o, o.GetName(), err)
		}
	}
	return nil
}

// testAgent is a node agent of the tests, on its own node, serving on a loopback port.
type testAgent struct {
	node *corev1.Node
	pod  *corev1.Pod // its pod in the agents' namespace, which the plugin finds
	url  string
	ln   *holdableListener
}

// startAgent registers a node, runs an agent for it until the test ends, and creates
// the agent's pod, Running on that node, as the DaemonSet's would be.
func startAgent(t *testing.T, name string) *testAgent {
	t.Helper()
	needAgents(t)
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{GenerateName: name + "-"}}
	if err := k8sClient.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: fuseboxNamespace, Name: "fusebox-node-" + node.Name, Labels: agentLabels},
		Spec: corev1.PodSpec{NodeName: node.Name, ServiceAccountName: "fusebox-node",
			Containers: []corev1.Container{{Name: "fuseboxd", Image: "fuseboxd"}}},
	}
	if err := k8sClient.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	deleteAtEnd(t, pod)
	// envtest runs no kubelet: the phase is set as one would.
	pod.Status.Phase = corev1.PodRunning
	if err := k8sClient.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}

	cfg := rest.CopyConfig(restConfig)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + fuseboxNamespace + ":fusebox-node",
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + fuseboxNamespace, "system:authenticated"},
		Extra: map[string][]string{
			"authentication.kubernetes.io/node-name": {node.Name},
			"authentication.kubernetes.io/node-uid":  {string(node.UID)},
			"authentication.kubernetes.io/pod-name":  {pod.Name},
			"authentication.kubernetes.io/pod-uid":   {string(pod.UID)},
		},
	}
	a, err := nodeagent.New(nodeagent.Options{Config: cfg, NodeName: node.Name, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &holdableListener{Listener: inner}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx, ln) }()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("agent of %s: %v", node.Name, err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("agent of %s still running 30s after its context ended", node.Name)
		}
	})
	testutil.Eventually(t, 30*time.Second, "the agent of "+node.Name+" is ready", func() error {
		if !a.Ready() {
			return fmt.Errorf("not ready")
		}
		return nil
	})
	return &testAgent{node: node, pod: pod, url: "http://" + inner.Addr().String(), ln: ln}
}

// holdableListener is an agent's listener that can stop serving, as a hung agent does:
// held, it takes each new connection and never hands it to the agent, so the request on
// it is never answered.
type holdableListener struct {
	net.Listener
	held   atomic.Bool
	mu     sync.Mutex
	parked []net.Conn // guarded by mu
}

func (l *holdableListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil || !l.held.Load() {
			return c, err
		}
		l.mu.Lock()
		l.parked = append(l.parked, c)
		l.mu.Unlock()
	}
}

func (l *holdableListener) Close() error {
	l.mu.Lock()
	for _, c := range l.parked {
		_ = c.Close()
	}
	l.parked = nil
	l.mu.Unlock()
	return l.Listener.Close()
}

// hold stops the agent answering new connections.
func (a *testAgent) hold() { a.ln.held.Store(true) }

// directFetcher reaches each agent at its own address, as the API server's pods/proxy
// reaches its pod: the reader's token in AgentTokenHeader, a connection of its own.
func directFetcher(agents ...*testAgent) agentFetcher {
	byPod := map[string]string{}
	for _, a := range agents {
		byPod[a.pod.Name] = a.url
	}
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	return func(ctx context.Context, agent *corev1.Pod, query url.Values, token string) (int, []byte, error) {
		base, ok := byPod[agent.Name]
		if !ok {
			return 0, nil, fmt.Errorf("no agent listens for pod %s", agent.Name)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+breakerconfig.AgentPodsPath+"?"+query.Encode(), nil)
		if err != nil {
			return 0, nil, err
		}
		req.Header.Set(breakerconfig.AgentTokenHeader, token)
		resp, err := hc.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, body, err
	}
}

// appPod creates a pod of service account app on the agent's node, of revision rev,
// as the scheduler would have bound it.
func (a *testAgent) appPod(t *testing.T, ns, name, rev string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}}
	if err := k8sClient.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{resiliencev1alpha1.LabelPodTemplateHash: rev}},
		Spec: corev1.PodSpec{NodeName: a.node.Name, ServiceAccountName: "app",
			Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	if err := k8sClient.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// report sends the pod's report to its agent, as pkg/breaker/kube does: PUT with the
// pod's projected token for the agents' audience.
func (a *testAgent) report(t *testing.T, p *corev1.Pod, entries ...breakerconfig.ReportEntry) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(p.Namespace).CreateToken(context.Background(), p.Spec.ServiceAccountName, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences:         []string{breakerconfig.NodeAgentAudience},
		ExpirationSeconds: ptr.To[int64](600),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(breakerconfig.AgentReport{Breakers: entries})
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	// The agent may not have its new pod in its cache yet: it looks it up, or answers
	// 403 until its watch delivers it.
	testutil.Eventually(t, wait, "pod "+p.Name+"'s report to the agent of "+a.node.Name, func() error {
		req, err := http.NewRequest(http.MethodPut, a.url+breakerconfig.AgentReportPath, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+tr.Status.Token)
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		answer, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%d: %s", resp.StatusCode, answer)
		}
		return nil
	})
}
