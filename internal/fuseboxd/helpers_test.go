package fuseboxd_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/internal/fuseboxd"
	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakertest"
	"github.com/fusebox-dev/fusebox/pkg/breaker/kube"
)

// daemon is a fuseboxd served in-process on a temporary Unix socket, its breakers on a
// clock the test moves and its config read from a directory the test writes, as the
// binary runs with --config-dir.
type daemon struct {
	t      testing.TB
	dir    string
	sock   string
	clock  *breakertest.Clock
	agent  *kube.Connection
	srv    *fuseboxd.Server
	client *http.Client
}

var quiet = slog.New(slog.DiscardHandler)

// testConfig is a rendered config document (docs/config-format.md) for name.
func testConfig(name string, generation int64, fields string) string {
	doc := fmt.Sprintf(`{"name":%q,"generation":%d,"openTimeout":"30s","window":"10s","failureRatio":0.5,"minimumThroughput":4,"successThreshold":2,"halfOpenPermittedCalls":1,"mode":"Enforce","scope":"Pod"}`, name, generation)
	if fields == "" {
		return doc
	}
	var m map[string]any
	_ = json.Unmarshal([]byte(doc), &m)
	_ = json.Unmarshal([]byte(fields), &m)
	b, _ := json.Marshal(m)
	return string(b)
}

func startDaemon(t testing.TB, o fuseboxd.Options, configs map[string]string) *daemon {
	t.Helper()
	return startDaemonServed(t, o, configs, (*fuseboxd.Server).Serve)
}

// startDaemonServed is startDaemon with the socket served by serve.
func startDaemonServed(t testing.TB, o fuseboxd.Options, configs map[string]string, serve func(*fuseboxd.Server, net.Listener) error) *daemon {
	t.Helper()
	// Unix socket paths are limited to about 100 bytes, which t.TempDir can exceed.
	base, err := os.MkdirTemp("", "fbd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	d := &daemon{t: t, dir: filepath.Join(base, "config"), sock: filepath.Join(base, "s.sock"),
		clock: breakertest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}
	if err := os.Mkdir(d.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, doc := range configs {
		d.writeConfig(name, doc)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d.agent, err = kube.Connect(ctx, kube.Options{
		ConfigDir: d.dir, PollInterval: 50 * time.Millisecond,
		BreakerOptions: []breaker.Option{breaker.WithClock(d.clock)},
		Logger:         quiet,
	})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if o.Logger == nil {
		o.Logger = quiet
	}
	o.Registry, o.Published, o.Ready, o.Clock = d.agent.Registry(), d.agent.Published, d.agent.Loaded, d.clock
	if d.srv, err = fuseboxd.New(o); err != nil {
		cancel()
		t.Fatal(err)
	}
	ln, err := fuseboxd.ListenUnix(d.sock)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- serve(d.srv, ln) }()
	d.client = unixClient(d.sock)
	t.Cleanup(func() {
		if err := d.srv.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
		cancel()
		<-d.agent.Done()
	})
	d.waitFor("config loaded", func() bool { code, _, _ := d.do("GET", "/readyz", ""); return code == 200 })
	return d
}

// serveLoopback serves the daemon on loopback TCP as well, as --listen does, and returns
// the address; Shutdown closes it.
func (d *daemon) serveLoopback() string {
	d.t.Helper()
	ln, err := fuseboxd.ListenLoopback("127.0.0.1:0")
	if err != nil {
		d.t.Fatal(err)
	}
	go func() { _ = d.srv.Serve(ln) }()
	return ln.Addr().String()
}

// unixClient speaks HTTP to the socket at path, as curl --unix-socket does.
func unixClient(path string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
		MaxIdleConnsPerHost: 64,
	}}
}

func (d *daemon) writeConfig(name, doc string) {
	d.t.Helper()
	// Written and renamed, as the kubelet swaps a ConfigMap volume: never half a file.
	tmp := filepath.Join(d.dir, ".tmp-"+name)
	if err := os.WriteFile(tmp, []byte(doc), 0o644); err != nil {
		d.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(d.dir, name+".json")); err != nil {
		d.t.Fatal(err)
	}
}

func (d *daemon) do(method, path, body string) (int, http.Header, []byte) {
	d.t.Helper()
	req, err := http.NewRequest(method, "http://fuseboxd"+path, strings.NewReader(body))
	if err != nil {
		d.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := d.client.Do(req)
	if err != nil {
		d.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		d.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

type permitAnswer struct {
	Permit       string `json:"permit"`
	State        string `json:"state"`
	LeaseMs      int64  `json:"leaseMs"`
	Reason       string `json:"reason"`
	RetryAfterMs int64  `json:"retryAfterMs"`
	Error        string `json:"error"`
}

// acquire asks for a permit and returns the answer's status and body.
func (d *daemon) acquire(name, body string) (int, permitAnswer) {
	d.t.Helper()
	code, _, b := d.do("POST", "/v1/breakers/"+name+"/permits", body)
	var a permitAnswer
	if err := json.Unmarshal(b, &a); err != nil {
		d.t.Fatalf("acquire %s: %d %q: %v", name, code, b, err)
	}
	return code, a
}

// mustAcquire gets a permit or fails the test.
func (d *daemon) mustAcquire(name string) permitAnswer {
	d.t.Helper()
	code, a := d.acquire(name, "")
	if code != http.StatusCreated || a.Permit == "" {
		d.t.Fatalf("acquire %s: %d %+v, want 201 and a permit", name, code, a)
	}
	return a
}

// settle reports the outcome of permit and returns the status.
func (d *daemon) settle(permit, outcome string) int {
	d.t.Helper()
	code, _, _ := d.do("POST", "/v1/permits/"+permit, fmt.Sprintf(`{"outcome":%q,"durationMs":3}`, outcome))
	return code
}

// call is one whole call through the API: a permit, then its outcome.
func (d *daemon) call(name, outcome string) {
	d.t.Helper()
	p := d.mustAcquire(name)
	if code := d.settle(p.Permit, outcome); code != http.StatusNoContent {
		d.t.Fatalf("settle %s: %d, want 204", outcome, code)
	}
}

type describedBreaker struct {
	Name       string           `json:"name"`
	State      string           `json:"state"`
	Mode       string           `json:"mode"`
	Counts     map[string]int64 `json:"counts"`
	Permits    permitFigures    `json:"permits"`
	Policy     map[string]any   `json:"policy"`
	Generation int64            `json:"generation"`
}

// permitFigures is the "permits" object of GET /v1/breakers/{name}.
type permitFigures struct {
	Held         int64 `json:"held"`
	Lapsed       int64 `json:"lapsed"`
	RefusedAtCap int64 `json:"refusedAtCap"`
}

func (d *daemon) describe(name string) describedBreaker {
	d.t.Helper()
	code, _, b := d.do("GET", "/v1/breakers/"+name, "")
	if code != http.StatusOK {
		d.t.Fatalf("GET %s: %d %s", name, code, b)
	}
	var out describedBreaker
	if err := json.Unmarshal(b, &out); err != nil {
		d.t.Fatal(err)
	}
	return out
}

func (d *daemon) wantState(name, want string) {
	d.t.Helper()
	if got := d.describe(name).State; got != want {
		d.t.Fatalf("state of %s = %s, want %s", name, got, want)
	}
}

func (d *daemon) waitFor(what string, cond func() bool) {
	d.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			d.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
