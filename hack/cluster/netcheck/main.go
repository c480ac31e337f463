// Command netcheck is a pod's view of the cluster's network, for test/cluster's specs
// on two nodes: it says which pod and node answered a request and from where the
// request came, and it makes a request of its own on command, so that a spec learns
// whether a pod on one node reaches a pod or a Service on the other, which pod answered,
// and whether the caller's address arrived unchanged. test/cluster/run.sh builds it into
// an image with hack/image.
//
//	GET /              {"pod": POD_NAME, "node": NODE_NAME, "from": the caller's IP}
//	GET /fetch?url=U   what http://... U answered this pod, or 502 and why not
//
// POD_NAME and NODE_NAME come from the downward API; LISTEN (default :8080) is the address.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	srv := &http.Server{
		Addr:              envOr("LISTEN", ":8080"),
		Handler:           handler(Identity{Pod: os.Getenv("POD_NAME"), Node: os.Getenv("NODE_NAME")}),
		ReadHeaderTimeout: 5 * time.Second,
	}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	fmt.Println("netcheck: pod", os.Getenv("POD_NAME"), "on node", os.Getenv("NODE_NAME"), "listening on", srv.Addr)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(os.Stderr, "netcheck:", err)
		os.Exit(1)
	}
}

// Identity is what GET / answers: who answered, and whom.
type Identity struct {
	Pod  string `json:"pod"`
	Node string `json:"node"`
	From string `json:"from,omitempty"`
}

// fetchTimeout bounds a /fetch: an address nobody routes to fails in this time, not in
// the kernel's minutes of SYN retries.
const fetchTimeout = 3 * time.Second

func handler(self Identity) http.Handler {
	// Never through a proxy the environment may name: the point is this pod's own route.
	client := &http.Client{Timeout: fetchTimeout, Transport: &http.Transport{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		id := self
		id.From, _, _ = net.SplitHostPort(r.RemoteAddr)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(id)
	})
	mux.HandleFunc("GET /fetch", func(w http.ResponseWriter, r *http.Request) {
		target := r.URL.Query().Get("url")
		if u, err := url.Parse(target); err != nil || u.Scheme != "http" || u.Host == "" {
			http.Error(w, fmt.Sprintf("url %q: want an absolute http:// URL", target), http.StatusBadRequest)
			return
		}
		req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, target, nil)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		resp, err := client.Do(req)
		if err != nil {
			http.Error(w, fmt.Sprintf("%s from pod %s: %v", target, self.Pod, err), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if err != nil || resp.StatusCode != http.StatusOK {
			http.Error(w, fmt.Sprintf("%s from pod %s: %s %v: %s", target, self.Pod, resp.Status, err, body), http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
		_, _ = w.Write(body)
	})
	return mux
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
