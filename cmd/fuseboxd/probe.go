package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// probeTimeout bounds one probe: the daemon answers /healthz from memory, in microseconds.
const probeTimeout = time.Second

// runProbe is `fuseboxd probe`.
func runProbe(args []string) error {
	socket := defaultSocket
	parse("probe", args, func(fs *flag.FlagSet) {
		fs.StringVar(&socket, "socket", defaultSocket, "the Unix socket `fuseboxd serve` serves on")
	})
	return probe(socket)
}

// probe asks the daemon serving on socket whether it serves (GET /healthz), and returns
// nil if it answers 200. `fuseboxd probe` runs it, as the startup probe the pod webhook
// gives the injected sidecar: the kubelet starts the pod's other containers only once it
// succeeds, so no worker starts before the socket answers.
func probe(socket string) error {
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		DisableKeepAlives: true,
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://fuseboxd/healthz", nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("probe %s: %w", socket, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("probe %s: GET /healthz answered %s", socket, resp.Status)
	}
	return nil
}
