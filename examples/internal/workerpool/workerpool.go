// Package workerpool runs the test the worker examples of other languages share: a pool
// of worker processes, each calling a local upstream through one fuseboxd breaker, while
// the upstream fails and then recovers. The circuit must open for all of them after the
// failures one process would need, and close for all of them after recovery.
package workerpool

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
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/internal/testbin"
	"github.com/fusebox-dev/fusebox/internal/testutil"
)

const (
	// Breaker is the breaker every worker calls through.
	Breaker           = "payments-api"
	minimumThroughput = 10
	config            = `{"name":"payments-api","generation":1,"openTimeout":"1s","window":"10s","failureRatio":0.5,"minimumThroughput":10,"successThreshold":2,"halfOpenPermittedCalls":1,"mode":"Enforce","scope":"Pod"}`
	// A generous bound for what a loaded machine may take: the test waits for each
	// state, never for a time.
	patience = 30 * time.Second
)

// Worker is how to start one worker of the pool. Each prints one line per call,
// `worker=ID call=N answer=ok`, or `answer=fallback reason=R` (R the refusal's reason,
// or "failed"), and stops once stopFile exists.
type Worker func(upstream, socket, stopFile string) *exec.Cmd

// Skip skips the test saying what to install, or fails it under CI, where .ci/run
// installs it.
func Skip(t *testing.T, msg string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// Run builds fuseboxd (internal/testbin: once for every suite), runs workers processes against it and an upstream that is down,
// then recovers, and checks what each of them saw.
func Run(t *testing.T, workers int, start Worker) {
	t.Helper()
	base, err := os.MkdirTemp("", "workers")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	sock, dir, stop := filepath.Join(base, "f.sock"), filepath.Join(base, "config"), filepath.Join(base, "stop")
	bin, err := testbin.Path(testbin.Fuseboxd)
	if err != nil {
		t.Fatalf("building fuseboxd: %v", err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, Breaker+".json"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	daemon := exec.Command(bin, "serve", "--socket", sock, "--config-dir", dir)
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = daemon.Process.Kill(); _ = daemon.Wait() })
	fusebox := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	state := func() string {
		resp, err := fusebox.Get("http://fuseboxd/v1/breakers/" + Breaker)
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

	outs := make([]*output, workers)
	procs := make([]*exec.Cmd, workers)
	for i := range workers {
		outs[i] = &output{}
		procs[i] = start(upstream.URL, sock, stop)
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
	// The calls in flight when it opened are given time to come back.
	time.Sleep(300 * time.Millisecond)
	failedWhileDown := failed.Load()
	// A worker slow to start (a loaded machine) must see the circuit open too before the
	// upstream recovers; meanwhile each failed probe re-opens it.
	waitFor(t, "every worker to see it open", func() bool {
		for _, out := range outs {
			if !strings.Contains(out.String(), "answer=fallback reason=open") {
				return false
			}
		}
		return true
	})
	healthy.Store(true)
	waitFor(t, "the circuit to close after recovery", func() bool { return state() == "closed" })
	waitFor(t, "every worker to see it closed", func() bool {
		for _, out := range outs {
			if !strings.HasSuffix(strings.TrimSpace(out.String()), "answer=ok") {
				return false
			}
		}
		return true
	})
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
	if failedWhileDown < minimumThroughput || failedWhileDown > minimumThroughput+int64(workers)-1 {
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

// output is a worker's output, read while the worker writes it.
type output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(p)
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.EventuallyEvery(t, patience, 10*time.Millisecond, what, cond)
}
