package kube_test

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/testbin"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// TestFuseboxdReportsAsItsPod: the fuseboxd binary, run as a pod's sidecar would be (its
// identity from POD_NAME, POD_NAMESPACE, POD_UID; the cluster's API instead of a
// directory), serves the namespace's published breakers and writes the pod's
// BreakerReport: a breaker tripped through the socket is reported Open, owned by the Pod.
func TestFuseboxdReportsAsItsPod(t *testing.T) {
	needEnv(t)
	t.Parallel()
	ns := newNamespace(t)
	writeConfigMap(t, ns, map[string]string{"payments.json": render(t, "payments", 4, testPolicy(), "Pod", nil)})
	uid := createPod(t, ns, "app")

	base, err := os.MkdirTemp("", "fbd-kube")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	sock, kubeconfig := filepath.Join(base, "f.sock"), filepath.Join(base, "kubeconfig")
	bin, err := testbin.Path(testbin.Fuseboxd)
	if err != nil {
		t.Fatalf("building fuseboxd: %v", err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["envtest"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "envtest"}
	kc.CurrentContext = "envtest"
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		t.Fatal(err)
	}

	var logs strings.Builder
	daemon := exec.Command(bin, "serve", "--socket", sock, "--kubeconfig", kubeconfig)
	daemon.Env = append(os.Environ(), "POD_NAME=app", "POD_NAMESPACE="+ns, "POD_UID="+string(uid))
	daemon.Stderr = &logs
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- daemon.Wait() }()
	t.Cleanup(func() {
		_ = daemon.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("fuseboxd:\n%s", logs.String())
		}
	})
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	post := func(path string) (int, error) {
		resp, err := c.Post("http://fuseboxd"+path, "application/json", nil)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	eventually(t, propagation, func() error {
		resp, err := c.Get("http://fuseboxd/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errStatus(resp.StatusCode)
		}
		return nil
	})
	if code, err := post("/v1/breakers/payments/trip"); err != nil || code != http.StatusNoContent {
		t.Fatalf("trip: %d %v", code, err)
	}
	eventually(t, propagation, func() error {
		return memberIs(ns, "payments", "app", wantReason(resiliencev1alpha1.StateOpen, breakerconfig.ReasonManual))
	})
	rep, es, err := reportOf(ns, "app")
	if err != nil {
		t.Fatal(err)
	}
	if o := rep.OwnerReferences; len(o) != 1 || o[0].UID != uid {
		t.Errorf("owner references %+v, want the Pod app (uid %s)", o, uid)
	}
	if e := es["payments"]; e.ConfigGeneration != 4 {
		t.Errorf("reported config generation %d, want 4", e.ConfigGeneration)
	}

	if err := daemon.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("fuseboxd did not exit within 15s of SIGTERM")
	}
}

type errStatus int

func (e errStatus) Error() string { return http.StatusText(int(e)) }
