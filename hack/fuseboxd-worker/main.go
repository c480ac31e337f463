// Command fuseboxd-worker is the smallest client of a pod's fuseboxd sidecar
// (docs/fuseboxd.md): every INTERVAL it asks for a permit on BREAKER, holds it for HOLD
// (the call's duration: 0 by default), reports the call it stands for as OUTCOME
// ("failure", "success" or "ignored"), and prints each answer on one line. CALLERS (1 by
// default) such loops run at once: calls in flight together, for a concurrency limit. It speaks plain HTTP/1.1 over the Unix socket, as curl --unix-socket or any
// language's HTTP client would, and knows nothing of Fusebox's Go packages.
//
// test/cluster runs it, in an image hack/image builds, beside the sidecar the pod webhook
// injects: a container of the pod reaching the socket, and its failures opening the
// circuit in the pod's report.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	socket := envOr("FUSEBOX_SOCKET", "/var/run/fusebox/fusebox.sock")
	name := envOr("BREAKER", "payments-api")
	outcome := envOr("OUTCOME", "failure")
	interval, err := time.ParseDuration(envOr("INTERVAL", "200ms"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "fuseboxd-worker: INTERVAL:", err)
		os.Exit(2)
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
	}}
	hold, err := time.ParseDuration(envOr("HOLD", "0s"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "fuseboxd-worker: HOLD:", err)
		os.Exit(2)
	}
	callers, err := strconv.Atoi(envOr("CALLERS", "1"))
	if err != nil || callers < 1 {
		fmt.Fprintf(os.Stderr, "fuseboxd-worker: CALLERS %q: want a whole number of at least 1\n", os.Getenv("CALLERS"))
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for {
				call(ctx, client, name, outcome, hold)
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		})
	}
	wg.Wait()
}

// call is one permit and its settle; each answer (or the error, while the sidecar is
// not serving yet) goes to stdout, for `kubectl logs`.
func call(ctx context.Context, client *http.Client, name, outcome string, hold time.Duration) {
	code, body, err := post(ctx, client, "/v1/breakers/"+name+"/permits", "")
	if err != nil {
		fmt.Println("acquire error:", err)
		return
	}
	fmt.Printf("acquire %d %s\n", code, body)
	if code != http.StatusCreated {
		return
	}
	var permit struct{ Permit string }
	if err := json.Unmarshal([]byte(body), &permit); err != nil {
		fmt.Println("acquire answer:", err)
		return
	}
	select {
	case <-ctx.Done():
	case <-time.After(hold):
	}
	code, body, err = post(ctx, client, "/v1/permits/"+permit.Permit, fmt.Sprintf(`{"outcome":%q,"durationMs":%d}`, outcome, max(1, hold.Milliseconds())))
	if err != nil {
		fmt.Println("settle error:", err)
		return
	}
	fmt.Printf("settle %s %d %s\n", outcome, code, body)
}

func post(ctx context.Context, client *http.Client, path, body string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://fuseboxd"+path, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b)), err
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
