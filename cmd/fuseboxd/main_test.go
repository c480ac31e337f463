package main

import (
	"context"
	"encoding/json"
	"errors"
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

	"github.com/fusebox-dev/fusebox/internal/testbin"
)

// fuseboxdBin is the binary built once for every test of this package (and for the other
// suites that run it: internal/testbin).
var fuseboxdBin string

func TestMain(m *testing.M) {
	if sock := os.Getenv(acquireOnceEnv); sock != "" {
		acquireOnce(sock)
		return
	}
	var err error
	if fuseboxdBin, err = testbin.Path(testbin.Fuseboxd); err != nil {
		fmt.Fprintf(os.Stderr, "building fuseboxd: %v\n", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// runningDaemon is the built fuseboxd running with --config-dir on a temporary socket.
type runningDaemon struct {
	cmd     *exec.Cmd
	sock    string
	dir     string
	client  *http.Client
	exited  chan struct{} // closed once the process has exited, with its error in exitErr
	exitErr error
}

// startBinary starts fuseboxd with a config directory holding configs (name → document)
// and waits until it is ready.
func startBinary(t *testing.T, configs map[string]string, args ...string) *runningDaemon {
	t.Helper()
	return startBinaryOn(t, "", configs, args...)
}

// startBinaryOn is startBinary on the socket sock; "" is a new one.
func startBinaryOn(t *testing.T, sock string, configs map[string]string, args ...string) *runningDaemon {
	t.Helper()
	base, err := os.MkdirTemp("", "fbd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	if sock == "" {
		sock = filepath.Join(base, "fusebox.sock")
	}
	d := &runningDaemon{sock: sock, dir: filepath.Join(base, "config"), exited: make(chan struct{})}
	if err := os.Mkdir(d.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, doc := range configs {
		if err := os.WriteFile(filepath.Join(d.dir, name+".json"), []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	d.cmd = exec.Command(fuseboxdBin, append([]string{"serve", "--socket", d.sock, "--config-dir", d.dir}, args...)...)
	d.cmd.Stderr = &testWriter{t: t}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.exitErr = d.cmd.Wait(); close(d.exited) }()
	t.Cleanup(func() {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.exited:
		case <-time.After(10 * time.Second):
			_ = d.cmd.Process.Kill()
		}
	})
	d.client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var dl net.Dialer
			return dl.DialContext(ctx, "unix", d.sock)
		},
	}}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if resp, err := d.client.Get("http://fuseboxd/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return d
			}
		}
		select {
		case <-d.exited:
			t.Fatalf("fuseboxd exited before it was ready: %v", d.exitErr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("fuseboxd not ready within 20s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (d *runningDaemon) post(t *testing.T, path, body string) (int, map[string]any) {
	t.Helper()
	resp, err := d.client.Post("http://fuseboxd"+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return resp.StatusCode, m
}

type testWriter struct{ t *testing.T }

func (w *testWriter) Write(p []byte) (int, error) {
	w.t.Logf("fuseboxd: %s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

const paymentsConfig = `{"name":"payments","generation":1,"openTimeout":"30s","window":"10s","failureRatio":0.5,"minimumThroughput":2,"successThreshold":1,"halfOpenPermittedCalls":1,"mode":"Enforce","scope":"Pod"}`

// TestBinary runs the built daemon as a pod would (minus the cluster): it serves the
// socket, opens a circuit from settled failures, and on SIGTERM settles what is
// outstanding, removes its socket and exits 0.
func TestBinary(t *testing.T) {
	d := startBinary(t, map[string]string{"payments": paymentsConfig})
	for range 2 {
		code, p := d.post(t, "/v1/breakers/payments/permits", "")
		if code != http.StatusCreated {
			t.Fatalf("acquire: %d %v", code, p)
		}
		if code, _ := d.post(t, "/v1/permits/"+p["permit"].(string), `{"outcome":"failure"}`); code != http.StatusNoContent {
			t.Fatalf("settle: %d", code)
		}
	}
	if code, m := d.post(t, "/v1/breakers/payments/permits", ""); code != http.StatusTooManyRequests || m["state"] != "open" {
		t.Fatalf("after 2 failures of 2: %d %v, want 429 open", code, m)
	}
	if code, _ := d.post(t, "/v1/breakers/other/permits", `{"leaseMs":60000}`); code != http.StatusCreated {
		t.Fatalf("acquire on another breaker: %d", code)
	}
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.exited:
		if d.exitErr != nil {
			t.Fatalf("exit after SIGTERM: %v", d.exitErr)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("fuseboxd did not exit within 15s of SIGTERM")
	}
	if _, err := os.Lstat(d.sock); !os.IsNotExist(err) {
		t.Errorf("socket left behind: %v", err)
	}
}

// TestListenRefusesNonLoopback: the API has no authentication, so --listen takes only a
// loopback address; the refusal names the program once (issue 35: it said "fuseboxd:
// fuseboxd: --listen").
func TestListenRefusesNonLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "localhost:0", "10.0.0.1:8089"} {
		out, err := exec.Command(fuseboxdBin, "serve", "--socket", filepath.Join(t.TempDir(), "s"), "--config-dir", t.TempDir(), "--listen", addr).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "only a loopback IP address") {
			t.Errorf("--listen %s: %v %s, want a refusal", addr, err, out)
		}
		if strings.Contains(string(out), "fuseboxd: fuseboxd:") {
			t.Errorf("--listen %s: the refusal names the program twice: %s", addr, out)
		}
	}
	d := startBinary(t, nil, "--listen", "127.0.0.1:0")
	_ = d
}

// TestProbe: --probe exits 0 while a daemon serves on the socket, and 1, naming the
// socket, when none does.
func TestProbe(t *testing.T) {
	d := startBinary(t, nil)
	if out, err := exec.Command(fuseboxdBin, "probe", "--socket", d.sock).CombinedOutput(); err != nil {
		t.Fatalf("probe of a serving daemon: %v\n%s", err, out)
	}
	missing := filepath.Join(t.TempDir(), "none.sock")
	out, err := exec.Command(fuseboxdBin, "probe", "--socket", missing).CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("probe of no daemon: %v, want exit status 1\n%s", err, out)
	}
	if !strings.Contains(string(out), missing) {
		t.Errorf("probe of no daemon said %q, want the socket named", out)
	}
}
