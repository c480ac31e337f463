package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/testenv"
	"github.com/fusebox-dev/fusebox/internal/testutil"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// TestNodeModeCarriesTheSidecar: the built binary in both of its cluster roles, on a real
// API server (envtest). `fuseboxd node` serves the node; a per-pod `fuseboxd serve` with
// FUSEBOX_NODE_AGENT set, and no API access at all (no in-cluster config, no downward
// API variables), takes its breakers' config from it through kube.OptionsFromEnvironment
// and reports through it: a trip over the socket lands in the node's NodeBreakerReport.
// On SIGTERM each exits 0: the sidecar first, as its pod goes before its node's agent.
func TestNodeModeCarriesTheSidecar(t *testing.T) {
	t.Parallel()
	env, err := testenv.New("../..")
	if err != nil {
		t.Fatalf("envtest control plane: %v (run `make envtest` or hack/envtest.sh)", err)
	}
	cfg, err := testenv.Start(env)
	if err != nil {
		t.Fatalf("envtest control plane: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(resiliencev1alpha1.AddToScheme(scheme))
	k8s, err := client.New(cfg, client.Options{Scheme: scheme})
	must(t, err)
	cs, err := kubernetes.NewForConfig(cfg)
	must(t, err)
	ctx := context.Background()

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
	must(t, k8s.Create(ctx, node))
	ns := "shop"
	must(t, k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	must(t, k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}}))
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "checkout"},
		Spec: corev1.PodSpec{NodeName: node.Name, ServiceAccountName: "app", Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
	must(t, k8s.Create(ctx, pod))
	doc := strings.Replace(paymentsConfig, `"generation":1`, `"generation":3`, 1)
	must(t, k8s.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: breakerconfig.ConfigMapName},
		Data: map[string]string{breakerconfig.Key("payments"): doc}}))

	// The agent, as its DaemonSet pod: its identity carries its node's name and UID.
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	must(t, clientcmd.WriteToFile(agentKubeconfig(cfg, node), kubeconfig))
	addr, metricsAddr := freeLoopback(t), freeLoopback(t)
	agent := startProcess(t, "agent", []string{"NODE_NAME=" + node.Name},
		"node", "--listen", addr, "--kubeconfig", kubeconfig, "--shutdown-grace", "5s", "--metrics-bind-address", metricsAddr)
	testutil.Eventually(t, 30*time.Second, "the agent ready", func() error {
		resp, err := http.Get("http://" + addr + breakerconfig.AgentReadyPath)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz %d", resp.StatusCode)
		}
		return nil
	})

	// The pod's sidecar, wired to the agent as the injection webhook wires it.
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "app", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences: []string{breakerconfig.NodeAgentAudience}, ExpirationSeconds: ptr.To[int64](3600),
		BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}, metav1.CreateOptions{})
	must(t, err)
	tokenFile := filepath.Join(dir, "token")
	must(t, os.WriteFile(tokenFile, []byte(tr.Status.Token), 0o600))
	sock := filepath.Join(dir, "fusebox.sock")
	sidecar := startProcess(t, "sidecar", []string{breakerconfig.EnvNodeAgent + "=http://" + addr, breakerconfig.EnvNodeAgentToken + "=" + tokenFile},
		"serve", "--socket", sock)
	side := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	testutil.Eventually(t, 30*time.Second, "the sidecar's config from the agent", func() error {
		resp, err := side.Get("http://fuseboxd/v1/breakers/payments")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var b struct{ Generation int64 }
		raw, _ := io.ReadAll(resp.Body)
		if json.Unmarshal(raw, &b) != nil || b.Generation != 3 {
			return fmt.Errorf("breaker: %s", raw)
		}
		return nil
	})
	resp, err := side.Post("http://fuseboxd/v1/breakers/payments/trip", "application/json", nil)
	must(t, err)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("trip: %d", resp.StatusCode)
	}
	testutil.Eventually(t, 30*time.Second, "the trip in the node's report", func() error {
		var r resiliencev1alpha1.NodeBreakerReport
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: node.Name}, &r); err != nil {
			return err
		}
		for _, e := range r.Breakers {
			if e.Name == "payments" && e.Pods == 1 && e.EarnedOpen == 1 && len(e.Notable) == 1 && e.Notable[0].UID == pod.UID && e.Notable[0].Reason == breakerconfig.ReasonManual {
				return nil
			}
		}
		return fmt.Errorf("entries %+v", r.Breakers)
	})

	// The agent's metrics, on --metrics-bind-address.
	testutil.Eventually(t, 30*time.Second, "the agent's metrics", func() error {
		resp, err := http.Get("http://" + metricsAddr + "/metrics")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		for _, want := range []string{"fusebox_node_agent_pods_reporting 1", "fusebox_node_agent_report_objects 1", `fusebox_node_agent_report_writes_total{result="success"}`, "fusebox_node_agent_config_streams 1"} {
			if !strings.Contains(string(raw), want) {
				return fmt.Errorf("no %q in\n%s", want, raw)
			}
		}
		return nil
	})

	// The sidecar's report is written (the trip is in the node's report), so it exits
	// without waiting out its grace period for a write; had the agent gone first, it would
	// wait the whole of it for an agent that no longer answers.
	stopProcess(t, "the sidecar", sidecar)
	stopProcess(t, "the agent", agent)
}

// stopProcess sends p SIGTERM and fails the test unless it exits 0. The bound only keeps a
// hung process from hanging the test: both shut down within their grace period (5 s).
func stopProcess(t *testing.T, name string, p *process) {
	t.Helper()
	must(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-p.exited:
		if p.err != nil {
			t.Errorf("%s after SIGTERM: %v", name, p.err)
		}
	case <-time.After(20 * time.Second):
		t.Errorf("%s did not exit within 20s of SIGTERM", name)
	}
}

// agentKubeconfig reaches cfg's API server as an agent pod's token on node would:
// service account fusebox-node with the node and pod extras. The group system:masters
// spares this test the agent's ClusterRole, which internal/nodeagent's suite checks.
func agentKubeconfig(cfg *rest.Config, node *corev1.Node) clientcmdapi.Config {
	return clientcmdapi.Config{
		Clusters: map[string]*clientcmdapi.Cluster{"envtest": {Server: cfg.Host, CertificateAuthorityData: cfg.CAData}},
		AuthInfos: map[string]*clientcmdapi.AuthInfo{"agent": {
			ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData,
			Impersonate:       "system:serviceaccount:fusebox-system:fusebox-node",
			ImpersonateGroups: []string{"system:masters", "system:serviceaccounts", "system:authenticated"},
			ImpersonateUserExtra: map[string][]string{
				"authentication.kubernetes.io/node-name": {node.Name},
				"authentication.kubernetes.io/node-uid":  {string(node.UID)},
				"authentication.kubernetes.io/pod-name":  {"fusebox-node-a"},
				"authentication.kubernetes.io/pod-uid":   {"agent-pod-uid"},
			},
		}},
		Contexts:       map[string]*clientcmdapi.Context{"agent": {Cluster: "envtest", AuthInfo: "agent"}},
		CurrentContext: "agent",
	}
}

// process is the built binary running under a test.
type process struct {
	cmd *exec.Cmd
	// exited is closed once the process has exited, with what Wait returned in err: a
	// channel that is closed, not sent on, so that the test and its cleanup can both wait
	// for it (the cleanup of a process the test had stopped used to wait 10 s for a value
	// the test had already taken).
	exited chan struct{}
	err    error
}

// startProcess runs the binary with args and, of the environment, only what a container
// would have besides env: no cluster and no pod variables.
func startProcess(t *testing.T, name string, env []string, args ...string) *process {
	t.Helper()
	cmd := exec.Command(fuseboxdBin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KUBERNETES_") && !strings.HasPrefix(kv, "POD_") && !strings.HasPrefix(kv, "FUSEBOX_") && !strings.HasPrefix(kv, "NODE_NAME=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = &testWriter{t: t}
	must(t, cmd.Start())
	p := &process{cmd: cmd, exited: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
		}
	})
	return p
}

func freeLoopback(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	addr := ln.Addr().String()
	must(t, ln.Close())
	return addr
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
