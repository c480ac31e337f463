package kube

import (
	"errors"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// The pod's side of the node agent's wire. The agent itself is in the operator's module
// (internal/nodeagent), whose envtest suite runs pods through this package against it;
// these are the parts that need no agent.

func TestNodeAgentURL(t *testing.T) {
	for _, tc := range []struct {
		url  string
		want string // "" for accepted
	}{
		{"http://fusebox-node.fusebox-system.svc:8476", ""},
		{"https://10.0.0.7:8476/", ""},
		{"fusebox-node:8476", "want http://HOST:PORT"},
		{"unix:///var/run/agent.sock", "not scheme \"unix\""},
		{"http://", "names no host"},
		{"http://[::1", "node agent URL"},
	} {
		_, err := newAgentClient(tc.url, "")
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.url, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want an error saying %q", tc.url, err, tc.want)
		}
	}
}

// TestNodeAgentFromEnvironment: with FUSEBOX_NODE_AGENT set, the pod needs nothing else:
// no downward-API variables, no in-cluster config (this test runs outside a pod).
func TestNodeAgentFromEnvironment(t *testing.T) {
	for _, v := range []string{EnvPodName, EnvNamespace, EnvPodUID, EnvConfigDir, "KUBERNETES_SERVICE_HOST"} {
		t.Setenv(v, "")
	}
	t.Setenv(EnvNodeAgent, "http://fusebox-node.fusebox-system.svc:8476")
	t.Setenv(EnvNodeAgentToken, "")
	o, err := OptionsFromEnvironment()
	if err != nil {
		t.Fatal(err)
	}
	if o.NodeAgent != "http://fusebox-node.fusebox-system.svc:8476" || o.Config != nil {
		t.Errorf("options %+v, want the agent and no API config", o)
	}
	c, err := newAgentClient(o.NodeAgent, o.NodeAgentToken)
	if err != nil {
		t.Fatal(err)
	}
	if c.tokenFile != breakerconfig.NodeAgentTokenPath {
		t.Errorf("token file %s, want the default %s", c.tokenFile, breakerconfig.NodeAgentTokenPath)
	}
	t.Setenv(EnvNodeAgent, "fusebox-node:8476")
	if _, err := OptionsFromEnvironment(); err == nil || !strings.Contains(err.Error(), EnvNodeAgent) {
		t.Errorf("a bad agent URL: %v, want an error naming %s", err, EnvNodeAgent)
	}
}

// TestNodeAgentTokenIsReadAgain: the kubelet rotates the projected token by replacing the
// file; every request reads what the file holds then.
func TestNodeAgentTokenIsReadAgain(t *testing.T) {
	file := filepath.Join(t.TempDir(), "token")
	c, err := newAgentClient("http://127.0.0.1:1", file)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.token(); err == nil || !strings.Contains(err.Error(), breakerconfig.NodeAgentAudience) {
		t.Errorf("no token file: %v, want an error saying which token is needed", err)
	}
	for _, tok := range []string{"first.token.value", "rotated.token.value"} {
		if err := os.WriteFile(file, []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		req, err := c.request(t.Context(), http.MethodGet, breakerconfig.AgentConfigPath, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := req.Header.Get("Authorization"); got != "Bearer "+tok {
			t.Errorf("Authorization %q, want the file's token %q", got, tok)
		}
		if req.URL.String() != "http://127.0.0.1:1/v1/config" {
			t.Errorf("URL %s", req.URL)
		}
	}
}

// TestAgentRefusals: which of the agent's answers are refusals (retried at the capped
// backoff, since retrying soon cannot help) and which are outages.
func TestAgentRefusals(t *testing.T) {
	s := &agentSink{}
	for status, refused := range map[int]bool{400: true, 401: true, 403: true, 409: true, 413: true, 429: false, 500: false, 503: false} {
		if got := s.refused(&agentError{status: status}); got != refused {
			t.Errorf("%d: refused %v, want %v", status, got, refused)
		}
	}
	if s.refused(errors.New("connection refused")) {
		t.Error("an unreachable agent counts as a refusal")
	}
	resp := &http.Response{StatusCode: 400, Body: io.NopCloser(strings.NewReader(`{"error":"invalid report of pod shop/a: breakers[0].failureRatePercent: must be between 0 and 100, is 101"}`))}
	err := readAgentError(resp)
	if !strings.Contains(err.Error(), "400 Bad Request: invalid report of pod shop/a: breakers[0].failureRatePercent") {
		t.Errorf("agent error reads %q", err)
	}
}

// TestConfigStreamAppliesChangesAndNoticesARestart: a snapshot that says what was applied
// last is not applied again (a reconnect finds the same config); a snapshot from another
// agent than before makes the reporter resend the whole report, at once.
func TestConfigStreamAppliesChangesAndNoticesARestart(t *testing.T) {
	c, err := newAgentClient("http://127.0.0.1:1", "")
	if err != nil {
		t.Fatal(err)
	}
	var applied []map[string]string
	var resends int
	c.restarted = func() { resends++ }
	s := &agentSource{client: c, apply: func(d map[string]string) { applied = append(applied, maps.Clone(d)) }, log: slog.New(slog.DiscardHandler)}
	doc := map[string]string{"payments.json": `{"name":"payments"}`}
	s.receive(breakerconfig.ConfigSnapshot{Agent: "a1"})                          // nothing published yet
	s.receive(breakerconfig.ConfigSnapshot{Agent: "a1", Exists: true, Data: doc}) // published
	s.receive(breakerconfig.ConfigSnapshot{Agent: "a1", Exists: true, Data: doc}) // the same, after a reconnect
	if len(applied) != 2 || applied[0] != nil || !maps.Equal(applied[1], doc) || resends != 0 {
		t.Fatalf("applied %v, resends %d; want nothing then the document, once, and no resend", applied, resends)
	}
	s.receive(breakerconfig.ConfigSnapshot{Agent: "a2", Exists: true, Data: doc}) // a restarted agent
	if len(applied) != 2 || resends != 1 {
		t.Errorf("after a restart: applied %d times, resends %d; want the same config kept and one resend", len(applied), resends)
	}
	s.receive(breakerconfig.ConfigSnapshot{Agent: "a2"}) // the ConfigMap deleted
	if len(applied) != 3 || applied[2] != nil {
		t.Errorf("a deleted ConfigMap: applied %v, want the defaults", applied)
	}
}

// TestResendGoesAtOnce: a report the receiver has lost goes again whole, even when all it
// holds is unearned and would otherwise wait its hold, and even when it is what was last
// written.
func TestResendGoesAtOnce(t *testing.T) {
	r := newReporter(&agentSink{}, slog.New(slog.DiscardHandler))
	r.holdFor = func() time.Duration { return time.Hour }
	b, err := breaker.New("payments", breaker.DefaultPolicy())
	if err != nil {
		t.Fatal(err)
	}
	r.configure(b, 1, "", sampled{})
	names, ms, dirty := r.pending()
	if dirty {
		t.Fatal("a Started entry went before its hold")
	}
	r.markWritten(names, ms) // as if the hold had ended and the write gone
	if _, _, dirty := r.pending(); dirty {
		t.Fatal("an unchanged report is to be written")
	}
	r.resendAll()
	names, _, dirty = r.pending()
	if !dirty || len(names) != 1 {
		t.Fatalf("after resendAll: dirty %v, names %v; want the whole report at once", dirty, names)
	}
	r.markWritten(names, ms)
	if _, _, dirty := r.pending(); dirty {
		t.Error("the resend is to be written again after it was")
	}
}
