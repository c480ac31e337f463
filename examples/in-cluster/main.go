// In-cluster is the smallest application that takes its breakers from the cluster: it
// calls kube.FromEnvironment, and from then on the breaker named flaky-upstream runs the
// policy of the CircuitBreaker of that name in the pod's namespace, hot-reloaded when
// the resource changes, and the pod reports the breaker's state back onto it.
//
// It calls a local upstream of its own, which fails for 5 seconds of every 10, so that
// `kubectl get cb -w` shows the circuit open and close. deploy/app.yaml runs it: a
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
	"syscall"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/httpbreaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/kube"
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
func run(ctx context.Context, out io.Writer, connect func(context.Context) (*breaker.Registry, error)) error {
	breakers, err := connect(ctx)
	if err != nil {
		return err
	}
	b := breakers.Get(breakerName)
	upstream := newUpstream()
	defer upstream.Close()
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

// upstream is a local service that answers 503 for 5 seconds of every 10.
type upstream struct {
	*httptest.Server
	start time.Time
}

func newUpstream() *upstream {
	u := &upstream{start: time.Now()}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if !u.healthy() {
			http.Error(w, "down for a while", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	}))
	return u
}

func (u *upstream) healthy() bool { return time.Since(u.start)%(10*time.Second) < 5*time.Second }

func (u *upstream) health() string {
	if u.healthy() {
		return "up"
	}
	return "down"
}
