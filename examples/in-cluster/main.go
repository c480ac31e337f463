// In-cluster is the smallest application that takes its breakers from the cluster: it
// calls kube.FromEnvironment, and from then on the breaker named flaky-upstream runs the
// policy of the CircuitBreaker of that name in the pod's namespace, hot-reloaded when
// the resource changes, and the pod reports the breaker's state back onto it.
//
// It calls a local upstream of its own, which fails for 5 seconds of every 10, so that
// `kubectl get cb -w` shows the circuit open and close. UPSTREAM_HEALTH (up, down, or
// flapping, the default) says how the upstream starts; with CONTROL_ADDR set (":8080",
// say), PUT /upstream with one of those words on that address changes it while the pod
// runs, which is how the cluster tests (test/cluster) fail and heal it on command. deploy/app.yaml runs it: a
// namespace, a ServiceAccount bound to the fusebox-breaker-client ClusterRole, the
// Deployment with the environment kube.FromEnvironment reads, and the CircuitBreaker.
//
// Outside a cluster it stops at once, saying what it misses (`make run` runs simulated pods
// like it against a local control plane):
//
//	go run ./examples/in-cluster
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/httpbreaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/kube"
	"github.com/fusebox-dev/fusebox/pkg/breaker/registry"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// In a pod: POD_NAME, POD_NAMESPACE and POD_UID from the downward API, and the pod's
	// service account to reach the API server.
	if err := run(ctx, os.Stdout, kube.FromEnvironment); err != nil {
		fmt.Fprintln(os.Stderr, "in-cluster:", err)
		if os.Getenv(kube.EnvPodName) == "" {
			fmt.Fprintln(os.Stderr, "in-cluster: this program runs in a pod (deploy/app.yaml); to see pods like it at work without a cluster, run `make run`")
		}
		os.Exit(1)
	}
}

// breakerName is the name of the CircuitBreaker whose policy the breaker runs.
const breakerName = "flaky-upstream"

// run connects the application's breakers to the cluster with connect, then calls the
// upstream through the breaker ten times a second until ctx is done, printing a line a
// second.
func run(ctx context.Context, out io.Writer, connect func(context.Context) (*registry.Registry, error)) error {
	breakers, err := connect(ctx)
	if err != nil {
		return err
	}
	b := breakers.Get(breakerName)
	upstream, err := newUpstream(os.Getenv("UPSTREAM_HEALTH"))
	if err != nil {
		return err
	}
	defer upstream.Close()
	if addr := os.Getenv("CONTROL_ADDR"); addr != "" {
		control := &http.Server{Addr: addr, Handler: upstream.control(), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = control.ListenAndServe() }()
		defer control.Close()
	}
	client := &http.Client{Transport: httpbreaker.NewTransport(b, nil), Timeout: time.Second}

	var answered, failed, notSent int
	var policy breaker.Policy
	calls := time.NewTicker(100 * time.Millisecond)
	defer calls.Stop()
	for i := 1; ; i++ {
		select {
		case <-ctx.Done():
			return nil
		case <-calls.C:
		}
		resp, err := client.Get(upstream.URL)
		switch {
		case errors.Is(err, breaker.ErrOpen):
			notSent++
		case err != nil:
			failed++
		default:
			if resp.StatusCode >= 500 {
				failed++
			} else {
				answered++
			}
			resp.Body.Close()
		}
		if i%10 != 0 {
			continue
		}
		if p := b.Policy(); p != policy {
			policy = p
			fmt.Fprintf(out, "policy of %s: open when %.0f%% of at least %d calls over %v fail, for %v; close after %d probes\n",
				breakerName, p.FailureRatio*100, p.MinimumThroughput, p.Window, p.OpenTimeout, p.SuccessThreshold)
		}
		fmt.Fprintf(out, "circuit %s, upstream %s: %d answered, %d failed, %d not sent\n",
			b.State(), upstream.health(), answered, failed, notSent)
		answered, failed, notSent = 0, 0, 0
	}
}

// upstream is a local service that answers 503 while it is down: always, never, or
// for 5 seconds of every 10 (flapping).
type upstream struct {
	*httptest.Server
	start time.Time

	mu   sync.Mutex
	mode string // guarded by mu: up, down or flapping
}

var upstreamModes = []string{"up", "down", "flapping"}

func newUpstream(mode string) (*upstream, error) {
	u := &upstream{start: time.Now()}
	if mode == "" {
		mode = "flapping"
	}
	if err := u.set(mode); err != nil {
		return nil, fmt.Errorf("UPSTREAM_HEALTH: %w", err)
	}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if !u.healthy() {
			http.Error(w, "down for a while", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	}))
	return u, nil
}

func (u *upstream) set(mode string) error {
	for _, m := range upstreamModes {
		if m == mode {
			u.mu.Lock()
			u.mode = mode
			u.mu.Unlock()
			return nil
		}
	}
	return fmt.Errorf("%q is none of %s", mode, strings.Join(upstreamModes, ", "))
}

// control serves PUT /upstream (body: up, down or flapping) and GET /upstream.
func (u *upstream) control() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /upstream", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 64))
		if err := u.set(strings.TrimSpace(string(body))); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintln(w, u.health())
	})
	mux.HandleFunc("GET /upstream", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, u.health()) })
	return mux
}

func (u *upstream) healthy() bool {
	u.mu.Lock()
	mode := u.mode
	u.mu.Unlock()
	switch mode {
	case "up":
		return true
	case "down":
		return false
	}
	return time.Since(u.start)%(10*time.Second) < 5*time.Second
}

func (u *upstream) health() string {
	if u.healthy() {
		return "up"
	}
	return "down"
}
