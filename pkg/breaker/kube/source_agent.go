package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// agentSource reads the namespace's config from the node's agent: one long GET of
// /v1/config?watch=true, whose every line is the whole of the namespace's published
// config (breakerconfig.ConfigSnapshot), the current one at once and one per change. The
// agent holds one ConfigMap watch for all the pods of the namespace on its node. While the
// agent cannot be reached the breakers keep their policies and decide alone, and the
// source reconnects with jittered backoff (watchBackoff, as a ConfigMap watch's re-lists).
type agentSource struct {
	client *agentClient
	apply  func(map[string]string)
	log    *slog.Logger

	loaded  bool              // a first snapshot was applied
	exists  bool              // whether the ConfigMap existed in the last one applied
	last    map[string]string // what was last applied, to apply only changes
	failing string            // the error of the current outage, logged once
}

func (s *agentSource) run(ctx context.Context) {
	backoff := watchBackoff
	for {
		connected, err := s.stream(ctx)
		if ctx.Err() != nil {
			return
		}
		if connected {
			backoff = watchBackoff
		}
		// A stream the agent ended (it is stopping) is no outage: the next one goes to
		// its successor, whose absence is.
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && err.Error() != s.failing {
			s.failing = err.Error()
			s.log.Warn("Cannot read the breaker config from the node agent; breakers keep their current policies and decide alone, retrying",
				"agent", s.client.base.Host, "error", err)
		}
		t := time.NewTimer(backoff.Step())
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// agentStreamSilence is how long a stream may deliver nothing, not even the agent's
// heartbeat (breakerconfig.AgentHeartbeatInterval), before the pod takes the agent for
// gone, closes it and reconnects: a connection whose agent vanished without closing it
// (its node's network torn down under it, a conntrack entry lost) would otherwise be read
// for ever, and no config change would reach the pod again. Nanoseconds, for tests.
var agentStreamSilence atomic.Int64

func init() { agentStreamSilence.Store(int64(breakerconfig.AgentStreamTimeout)) }

// errAgentSilent ends a stream that was silent for agentStreamSilence.
var errAgentSilent = errors.New("the node agent's config stream fell silent")

// stream reads one stream until it breaks or falls silent, applying every snapshot, and
// reports whether the agent accepted it.
func (s *agentSource) stream(ctx context.Context) (connected bool, err error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	silence := time.Duration(agentStreamSilence.Load())
	silent := time.AfterFunc(silence, func() { cancel(errAgentSilent) })
	defer silent.Stop()
	defer func() {
		if errors.Is(context.Cause(ctx), errAgentSilent) {
			err = fmt.Errorf("%w: nothing, not even a heartbeat, for %v; reconnecting", errAgentSilent, silence)
		}
	}()
	req, err := s.client.request(ctx, http.MethodGet, breakerconfig.AgentConfigPath, nil)
	if err != nil {
		return false, err
	}
	q := req.URL.Query()
	q.Set(breakerconfig.AgentWatchParam, "true")
	req.URL.RawQuery = q.Encode()
	resp, err := s.client.http.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, readAgentError(resp)
	}
	if s.failing != "" {
		s.log.Info("Reading the breaker config from the node agent again", "agent", s.client.base.Host)
		s.failing = ""
	}
	// Every byte, a heartbeat's newline too, puts the silence off.
	dec := json.NewDecoder(&heardReader{r: resp.Body, heard: func() { silent.Reset(silence) }})
	for {
		var snap breakerconfig.ConfigSnapshot
		if err := dec.Decode(&snap); err != nil {
			return true, err
		}
		s.receive(snap)
	}
}

// heardReader calls heard after every read that delivered bytes.
type heardReader struct {
	r     io.Reader
	heard func()
}

func (h *heardReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	if n > 0 {
		h.heard()
	}
	return n, err
}

// receive applies one snapshot, unless it says what was applied last (a reconnect finds
// the same config), and tells the reporter to resend when the agent is a new one.
func (s *agentSource) receive(snap breakerconfig.ConfigSnapshot) {
	if s.client.observe(snap.Agent) {
		s.log.Info("The node agent restarted; sending this pod's report again", "agent", s.client.base.Host)
		if s.client.restarted != nil {
			s.client.restarted()
		}
	}
	data := snap.Data
	if !snap.Exists {
		data = nil
	}
	if s.loaded && s.exists == snap.Exists && maps.Equal(data, s.last) {
		return
	}
	if !s.loaded {
		s.log.Info("Reading breaker config from the node agent", "agent", s.client.base.Host, "published", snap.Exists)
	}
	s.loaded, s.exists, s.last = true, snap.Exists, data
	s.apply(data)
}
