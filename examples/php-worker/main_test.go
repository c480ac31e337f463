package phpworker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

const (
	workers           = 8
	minimumThroughput = 10
	config            = `{"name":"payments-api","generation":1,"openTimeout":"1s","window":"10s","failureRatio":0.5,"minimumThroughput":10,"successThreshold":2,"halfOpenPermittedCalls":1,"mode":"Enforce","scope":"Pod"}`
)

// TestWorkersShareOneBreaker runs eight php-cli workers against one fuseboxd and an
// upstream that is down, then recovers: the circuit opens for all of them after the
// failures one process would need, and closes for all of them after recovery.
func TestWorkersShareOneBreaker(t *testing.T) {
	php := lookPHP(t)
	base, err := os.MkdirTemp("", "phpw")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	bin, sock, dir, stop := filepath.Join(base, "fuseboxd"), filepath.Join(base, "f.sock"), filepath.Join(base, "config"), filepath.Join(base, "stop")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/fusebox-dev/fusebox/cmd/fuseboxd").CombinedOutput(); err != nil {
		t.Fatalf("building fuseboxd: %v\n%s", err, out)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "payments-api.json"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	daemon := exec.Command(bin, "--socket", sock, "--config-dir", dir)
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = daemon.Process.Kill(); _ = daemon.Wait() })
	fusebox := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	state := func() string {
		resp, err := fusebox.Get("http://fuseboxd/v1/breakers/payments-api")
		if err != nil {
			return "unreachable"
		}
		defer resp.Body.Close()
		var b struct{ State string }
		_ = json.NewDecoder(resp.Body).Decode(&b)
		return b.State
	}
	waitFor(t, "fuseboxd", func() bool { return state() == "closed" })

	var healthy atomic.Bool
	var failed, served atomic.Int64
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if !healthy.Load() {
			failed.Add(1)
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		served.Add(1)
		fmt.Fprintln(w, "quote")
	}))
	t.Cleanup(upstream.Close)

	outs := make([]*bytes.Buffer, workers)
	procs := make([]*exec.Cmd, workers)
	for i := range workers {
		outs[i] = &bytes.Buffer{}
		procs[i] = exec.Command(php, "worker.php", "--breaker", "payments-api", "--upstream", upstream.URL,
			"--socket", sock, "--timeout-ms", "10000", "--interval-ms", "10", "--stop-file", stop, "--max-calls", "100000")
		procs[i].Stdout, procs[i].Stderr = outs[i], outs[i]
		if err := procs[i].Start(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, p := range procs {
			_ = p.Process.Kill()
		}
	})

	waitFor(t, "the circuit to open", func() bool { return state() == "open" })
	// Every worker's calls now fail fast; none reach the upstream until the open timeout.
	time.Sleep(300 * time.Millisecond)
	failedWhileDown := failed.Load()
	healthy.Store(true)
	waitFor(t, "the circuit to close after recovery", func() bool { return state() == "closed" })
	time.Sleep(500 * time.Millisecond)
	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for i, p := range procs {
		if err := p.Wait(); err != nil {
			t.Fatalf("worker %d: %v\n%s", i, err, outs[i])
		}
	}

	// One process would need minimumThroughput failures; the pool needs no more, give or
	// take the calls already in flight when the last of them came back.
	if failedWhileDown < minimumThroughput || failedWhileDown > minimumThroughput+workers-1 {
		t.Errorf("the upstream failed %d calls before the circuit opened, want %d to %d", failedWhileDown, minimumThroughput, minimumThroughput+workers-1)
	}
	for i, out := range outs {
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		if !strings.Contains(out.String(), "answer=fallback reason=open") {
			t.Errorf("worker %d never saw the circuit open:\n%s", i, out)
		}
		if last := lines[len(lines)-1]; !strings.HasSuffix(last, "answer=ok") {
			t.Errorf("worker %d's last call after recovery: %q, want ok", i, last)
		}
		t.Logf("worker %d: %d calls, last %q", i, len(lines), lines[len(lines)-1])
	}
	t.Logf("upstream: %d failed calls while down (minimumThroughput %d, %d workers), %d served after recovery", failedWhileDown, minimumThroughput, workers, served.Load())
}

func lookPHP(t *testing.T) string {
	t.Helper()
	php, err := exec.LookPath("php")
	if err == nil {
		err = exec.Command(php, "-r", "exit(function_exists('curl_init') ? 0 : 1);").Run()
	}
	if err != nil {
		msg := fmt.Sprintf("php with curl not available (%v): apt-get install php-cli php-curl", err)
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return php
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
