package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

// Issue 35: `make run USE_EXISTING_CLUSTER=true` without a kubeconfig printed a JSON stack
// trace naming KUBERNETES_MASTER. With nothing to reach, the manager says in one line what
// is missing and what to do; with a kubeconfig it uses it.
func TestRestConfigWithoutAClusterSaysWhatToDo(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv(clientcmd.RecommendedConfigPathEnvVar, "")
	_, err := restConfig(false)
	if err == nil {
		t.Fatal("no kubeconfig anywhere: want an error")
	}
	msg := err.Error()
	for _, want := range []string{"no cluster to run against", "KUBECONFIG", "make run"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q does not say %q", msg, want)
		}
	}
	if strings.Contains(msg, "\n") || strings.Contains(msg, "KUBERNETES_MASTER") {
		t.Errorf("%q: want one line, in our words", msg)
	}

	kubeconfig := filepath.Join(home, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: local, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: admin, user: {token: secret}}]
contexts: [{name: local, context: {cluster: local, user: admin}}]
current-context: local
`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(clientcmd.RecommendedConfigPathEnvVar, kubeconfig)
	cfg, err := restConfig(false)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://127.0.0.1:6443" {
		t.Errorf("host %q, want the kubeconfig's", cfg.Host)
	}
}

// Outside a pod the manager listens on loopback only, unless a flag says otherwise; in a
// pod on every interface, for the kubelet, the webhook Service and a scraper.
func TestListenDefaults(t *testing.T) {
	loopback := func(hostport string) bool {
		host, _, err := net.SplitHostPort(hostport)
		if err != nil {
			host = hostport
		}
		ip := net.ParseIP(host)
		return ip != nil && ip.IsLoopback()
	}
	out := listenDefaults(false)
	for what, addr := range map[string]string{
		"metrics":             out.metrics("", false),
		"secure metrics":      out.metrics("", true),
		"health probes":       out.probes,
		"webhook server host": out.webhooks,
		"rollout gate":        out.gate,
	} {
		if !loopback(addr) {
			t.Errorf("outside a pod, %s on %q, want loopback", what, addr)
		}
	}
	in := listenDefaults(true)
	if in.metrics("", true) != ":8443" || in.metrics("", false) != ":8080" || in.probes != ":8081" || in.webhooks != "" || in.gate != ":8444" {
		t.Errorf("in a pod: %+v, want every interface", in)
	}
	if got := out.metrics("0", false); got != "0" {
		t.Errorf("an address the flag set is kept: got %q", got)
	}
}
