package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/yaml"

	"github.com/fusebox-dev/fusebox/internal/testenv"
)

// The metrics endpoint the manager serves by default answers only clients the
// API server authenticates and authorizes for GET /metrics, and the
// metrics-reader ClusterRole of config/rbac is what authorizes them.
func TestSecureMetricsNeedAnAuthorizedToken(t *testing.T) {
	ctrl.SetLogger(logr.Discard())
	env, err := testenv.New(filepath.Join("..", ".."))
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skipf("SKIPPED: %v", err)
	}
	cfg, err := testenv.Start(env)
	if err != nil {
		t.Fatalf("start envtest: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })

	addr := freeAddress(t)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Metrics:                metricsServerOptions(addr, true),
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})

	url := "https://" + addr + "/metrics"
	// Anonymous: no token, no metrics. Polled, as the server starts asynchronously.
	var code int
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, _, err = scrape(url, "")
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("metrics endpoint never answered: %v", err)
	}
	if code != http.StatusUnauthorized {
		t.Errorf("anonymous scrape: HTTP %d, want %d", code, http.StatusUnauthorized)
	}

	cs := kubernetes.NewForConfigOrDie(cfg)
	const ns, sa = "default", "prometheus"
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest: %v", err)
	}
	token := tr.Status.Token

	// Authenticated but not yet authorized.
	if code, body, err := scrape(url, token); err != nil || code != http.StatusForbidden {
		t.Errorf("scrape by an unbound service account: HTTP %d, %v (%q), want %d", code, err, body, http.StatusForbidden)
	}

	// The metrics-reader ClusterRole as deployed, bound to the service account.
	var reader rbacv1.ClusterRole
	data, err := os.ReadFile(filepath.Join("..", "..", "config", "rbac", "metrics_reader_role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &reader); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &reader, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "prometheus-metrics-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: reader.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}},
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The filter caches a denial for a few seconds and RBAC takes a moment to
	// see the binding, so poll.
	deadline = time.Now().Add(60 * time.Second)
	var body string
	for {
		code, body, err = scrape(url, token)
		if (err == nil && code == http.StatusOK) || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err != nil || code != http.StatusOK {
		t.Fatalf("scrape by a metrics-reader: HTTP %d, %v (%q), want 200", code, err, body)
	}
	if !strings.Contains(body, "# TYPE") {
		t.Errorf("scrape by a metrics-reader returned no metrics: %q", body)
	}
}

func TestMetricsDefaults(t *testing.T) {
	for _, tc := range []struct {
		addr   string
		secure bool
		want   string
	}{
		{"", true, ":8443"},
		{"", false, ":8080"},
		{"0", true, "0"},
		{":9000", false, ":9000"},
	} {
		opts := metricsServerOptions(tc.addr, tc.secure)
		if opts.BindAddress != tc.want || opts.SecureServing != tc.secure || (opts.FilterProvider != nil) != tc.secure {
			t.Errorf("metricsServerOptions(%q, %v) = address %q, secure %v, filter %v; want %q, %v, %v",
				tc.addr, tc.secure, opts.BindAddress, opts.SecureServing, opts.FilterProvider != nil, tc.want, tc.secure, tc.secure)
		}
	}
}

func scrape(url, token string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	// The server's certificate is self-signed at start; what is under test
	// here is who may read, not who is serving.
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // see above
	}}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func freeAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return fmt.Sprintf("127.0.0.1:%d", l.Addr().(*net.TCPAddr).Port)
}
