// Package localcluster runs a local Kubernetes control plane (the envtest
// kube-apiserver and etcd) with Fusebox's CRDs installed, for `make run` on a machine
// without a cluster, and holds the directory of a local run for that run alone.
package localcluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/fusebox-dev/fusebox/internal/testenv"
)

// Cluster is a running local control plane.
type Cluster struct {
	env *envtest.Environment
	// Config reaches the API server as a cluster administrator.
	Config *rest.Config
	// Kubeconfig is the path of a kubeconfig file for kubectl and the manager.
	Kubeconfig string
}

// Start starts the control plane, installs the CRDs and admission policies found
// under repoRoot and writes an administrator kubeconfig to kubeconfigPath.
func Start(repoRoot, kubeconfigPath string) (*Cluster, error) {
	return start(repoRoot, kubeconfigPath, false)
}

// StartWithWebhooks is Start, plus Fusebox's webhook configurations
// (config/webhook/manifests.yaml) pointing at a local port, with a CA and
// serving certificate of envtest's own. Run the manager with WebhookArgs to
// serve them; until it does, creating a CircuitBreaker is refused.
func StartWithWebhooks(repoRoot, kubeconfigPath string) (*Cluster, error) {
	return start(repoRoot, kubeconfigPath, true)
}

func start(repoRoot, kubeconfigPath string, webhooks bool) (*Cluster, error) {
	env, err := testenv.New(repoRoot)
	if err != nil {
		return nil, err
	}
	if webhooks {
		env.WebhookInstallOptions = envtest.WebhookInstallOptions{
			Paths: []string{filepath.Join(repoRoot, "config", "webhook", "manifests.yaml")},
			// Loopback only, as the API server and etcd listen: nothing of a local run is
			// for other machines to reach.
			LocalServingHost: "127.0.0.1",
		}
	}
	cfg, err := testenv.Start(env)
	if err != nil {
		return nil, fmt.Errorf("start control plane: %w", err)
	}
	c := &Cluster{env: env, Config: cfg}
	if err := testenv.InstallPolicies(cfg, repoRoot); err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("install admission policies: %w", err)
	}
	if err := c.writeKubeconfig(kubeconfigPath); err != nil {
		_ = env.Stop()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) writeKubeconfig(path string) error {
	admin, err := c.env.AddUser(envtest.User{Name: "fusebox-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("add admin user: %w", err)
	}
	data, err := admin.KubeConfig()
	if err != nil {
		return fmt.Errorf("render kubeconfig: %w", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(abs, data, 0o600); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	c.Kubeconfig = abs
	return nil
}

// WebhookArgs are the manager flags that serve the webhooks StartWithWebhooks
// installed; none after Start.
func (c *Cluster) WebhookArgs() []string {
	o := c.env.WebhookInstallOptions
	if o.LocalServingPort == 0 {
		return nil
	}
	return []string{
		"--webhook-cert-mode=external",
		"--webhook-host=" + o.LocalServingHost,
		"--webhook-port=" + strconv.Itoa(o.LocalServingPort),
		"--webhook-cert-dir=" + o.LocalServingCertDir,
	}
}

// ManagerArgs are the flags of a manager run against the cluster: the webhooks of
// WebhookArgs, and metrics and health probes on free loopback ports, returned as metrics
// and probes (host:port). Never the manager's usual :8080 and :8081: another local run, or
// anything else, may hold them, and kubectl without a kubeconfig asks localhost:8080.
func (c *Cluster) ManagerArgs() (args []string, metrics, probes string, err error) {
	if metrics, err = freeLoopbackAddress(); err != nil {
		return nil, "", "", err
	}
	if probes, err = freeLoopbackAddress(); err != nil {
		return nil, "", "", err
	}
	args = append([]string{"--metrics-bind-address=" + metrics, "--health-probe-bind-address=" + probes}, c.WebhookArgs()...)
	return args, metrics, probes, nil
}

// freeLoopbackAddress is a 127.0.0.1 port nothing listens on now. Another process could
// take it before the manager does; the manager then says so and exits, and localcluster
// with it.
func freeLoopbackAddress() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// Stop stops the control plane; everything in it is gone.
func (c *Cluster) Stop() error {
	return c.env.Stop()
}

// Apply creates or updates (server-side apply) every object in the YAML
// files of dir, skipping kustomization files; an object that names no
// namespace goes to default, as kubectl apply would put it.
func Apply(ctx context.Context, cl client.Client, dir string) ([]string, error) {
	objs, err := testenv.ReadManifests(dir)
	if err != nil {
		return nil, err
	}
	var applied []string
	for _, u := range objs {
		if u.GetNamespace() == "" {
			u.SetNamespace("default")
		}
		if err := cl.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("fusebox-local"), client.ForceOwnership); err != nil {
			return applied, fmt.Errorf("apply %s %s from %s: %w", u.GetKind(), u.GetName(), dir, err)
		}
		applied = append(applied, fmt.Sprintf("%s/%s", strings.ToLower(u.GetKind()), u.GetName()))
	}
	return applied, nil
}
