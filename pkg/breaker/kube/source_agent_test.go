package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// TestConfigStreamOfASilentAgentReconnects: a stream that delivers its snapshot and then
// nothing, not even the heartbeat the agent writes every AgentHeartbeatInterval, is taken
// for a dead agent's: the pod closes it after agentStreamSilence and connects again. A
// stream that delivers only heartbeats is kept. The silence is shortened for the test;
// the agent here is a stand-in that says what a real one would, then nothing.
func TestConfigStreamOfASilentAgentReconnects(t *testing.T) {
	// Not parallel: it changes the package's silence, which every stream reads; no other
	// test runs while it does.
	old := agentStreamSilence.Load()
	agentStreamSilence.Store(int64(300 * time.Millisecond))
	t.Cleanup(func() { agentStreamSilence.Store(old) })

	for _, tc := range []struct {
		name       string
		heartbeat  time.Duration // 0: none
		reconnects bool
	}{
		{"silent", 0, true},
		{"heartbeats only", 50 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var streams atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != breakerconfig.AgentConfigPath || r.URL.Query().Get(breakerconfig.AgentWatchParam) != "true" {
					http.NotFound(w, r)
					return
				}
				streams.Add(1)
				w.Header().Set("Content-Type", breakerconfig.AgentStreamType)
				_, _ = fmt.Fprintln(w, `{"agent":"a1","exists":false}`)
				w.(http.Flusher).Flush()
				var beat <-chan time.Time
				if tc.heartbeat > 0 {
					tick := time.NewTicker(tc.heartbeat)
					defer tick.Stop()
					beat = tick.C
				}
				for {
					select {
					case <-r.Context().Done():
						return
					case <-beat:
						_, _ = w.Write([]byte("\n"))
						w.(http.Flusher).Flush()
					}
				}
			}))
			defer srv.Close()
			token := filepath.Join(t.TempDir(), "token")
			if err := os.WriteFile(token, []byte("a.token.value"), 0o600); err != nil {
				t.Fatal(err)
			}
			c, err := newAgentClient(srv.URL, token)
			if err != nil {
				t.Fatal(err)
			}
			defer c.close()
			var applied atomic.Int32
			s := &agentSource{client: c, apply: func(map[string]string) { applied.Add(1) }, log: slog.New(slog.DiscardHandler)}
			if tc.reconnects {
				ctx, cancel := context.WithCancel(t.Context())
				done := make(chan struct{})
				go func() { defer close(done); s.run(ctx) }()
				defer func() { cancel(); <-done }()
				deadline := time.Now().Add(20 * time.Second)
				for streams.Load() < 2 && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
				if n := streams.Load(); n < 2 {
					t.Errorf("the pod opened %d streams, want it to reconnect after the silence", n)
				}
				if n := applied.Load(); n != 1 {
					t.Errorf("the config applied %d times, want once: the reconnect found the same", n)
				}
				return
			}
			// Heartbeats alone keep the stream: it ends when the pod stops, long past the
			// silence, and never for being silent.
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Duration(agentStreamSilence.Load()))
			defer cancel()
			connected, err := s.stream(ctx)
			if !connected || errors.Is(err, errAgentSilent) || ctx.Err() == nil {
				t.Errorf("a stream of heartbeats: connected %v, ended with %v before the pod stopped; want it kept", connected, err)
			}
			if n := streams.Load(); n != 1 {
				t.Errorf("%d streams, want the one kept", n)
			}
		})
	}
}
