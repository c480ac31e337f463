package kube

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// agentSendTimeout bounds one report sent to the node agent. The agent answers from
// memory (it writes the node's report later, on its own pace), so a few seconds is
// already a sick agent; the report is retried like any failed write.
const agentSendTimeout = 10 * time.Second

// agentClient is the pod's connection to its node's agent (docs/design.md §9), shared by
// the config stream (source_agent.go) and the report (agentSink): the agent's URL, the
// pod's token for it, and which agent answered last, so that a restarted one is noticed.
type agentClient struct {
	base      *url.URL
	tokenFile string
	http      *http.Client
	// restarted is called when a config stream meets another agent than the one that
	// answered before: the new one holds none of this pod's report.
	restarted func()

	mu    sync.Mutex
	agent string // guarded by mu: the identity of the agent that answered last
}

func newAgentClient(rawURL, tokenFile string) (*agentClient, error) {
	u, err := url.Parse(rawURL)
	switch {
	case err != nil:
		return nil, fmt.Errorf("kube: node agent URL %q: %w", rawURL, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("kube: node agent URL %q: want http://HOST:PORT (%s), not scheme %q", rawURL, breakerconfig.EnvNodeAgent, u.Scheme)
	case u.Host == "":
		return nil, fmt.Errorf("kube: node agent URL %q names no host: want http://HOST:PORT", rawURL)
	}
	if tokenFile == "" {
		tokenFile = breakerconfig.NodeAgentTokenPath
	}
	tr := &http.Transport{
		// The agent is on this node, behind a Service: no proxy between.
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 15 * time.Second}).DialContext,
		MaxIdleConnsPerHost:   2,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: agentSendTimeout,
	}
	return &agentClient{base: u, tokenFile: tokenFile, http: &http.Client{Transport: tr}}, nil
}

// token reads the pod's token. The kubelet rotates the file well before the token
// expires, so it is read for every request rather than kept.
func (c *agentClient) token() (string, error) {
	b, err := os.ReadFile(c.tokenFile)
	if err != nil {
		return "", fmt.Errorf("read the node agent token: %w (the pod needs a projected service-account token with audience %s there, or %s naming its file)", err, breakerconfig.NodeAgentAudience, breakerconfig.EnvNodeAgentToken)
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", fmt.Errorf("the node agent token file %s is empty", c.tokenFile)
	}
	return t, nil
}

// request is a request to the agent at path, carrying the pod's token.
func (c *agentClient) request(ctx context.Context, method, path string, body []byte) (*http.Request, error) {
	tok, err := c.token()
	if err != nil {
		return nil, err
	}
	u := c.base.JoinPath(path)
	req, err := http.NewRequestWithContext(ctx, method, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req, nil
}

// observe records the identity of the agent that answered, and reports whether it is
// another one than answered before.
func (c *agentClient) observe(agent string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	prev := c.agent
	c.agent = agent
	return prev != "" && agent != prev
}

// close drops the idle connections to the agent.
func (c *agentClient) close() { c.http.CloseIdleConnections() }

// agentError is the agent refusing a request: its status and what it said.
type agentError struct {
	status int
	msg    string
}

func (e *agentError) Error() string {
	return fmt.Sprintf("node agent: %d %s: %s", e.status, http.StatusText(e.status), e.msg)
}

// readAgentError turns an answer the agent did not accept into an agentError.
func readAgentError(resp *http.Response) error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var body breakerconfig.AgentError
	msg := strings.TrimSpace(string(raw))
	if json.Unmarshal(raw, &body) == nil && body.Error != "" {
		msg = body.Error
	}
	return &agentError{status: resp.StatusCode, msg: msg}
}

// agentSink sends the pod's report to its node's agent: PUT the whole of it, every time.
// The pod needs no API access; the agent carries the report into its node's
// NodeBreakerReport.
type agentSink struct{ c *agentClient }

func (s *agentSink) receiver() string { return "node agent" }
func (s *agentSink) describe() string { return s.c.base.Host }

// refused reports whether the agent said no to the report itself: it fails the schema's
// bounds (400), the token is not good (401: the next try reads the file again), the pod
// is not bound to the agent's node (403), the node's report has no room for it (409), or
// it is too big (413). An agent starting (503) or unreachable is not a refusal.
func (s *agentSink) refused(err error) bool {
	var ae *agentError
	return errors.As(err, &ae) && ae.status >= 400 && ae.status < 500 && ae.status != http.StatusTooManyRequests
}

func (s *agentSink) send(ctx context.Context, entries []breakerconfig.ReportEntry) error {
	ctx, cancel := context.WithTimeout(ctx, agentSendTimeout)
	defer cancel()
	if entries == nil {
		entries = []breakerconfig.ReportEntry{}
	}
	body, err := json.Marshal(breakerconfig.AgentReport{Breakers: entries})
	if err != nil {
		return err
	}
	req, err := s.c.request(ctx, http.MethodPut, breakerconfig.AgentReportPath, body)
	if err != nil {
		return err
	}
	resp, err := s.c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return readAgentError(resp)
	}
	var ack breakerconfig.AgentAck
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&ack); err != nil {
		return fmt.Errorf("node agent: unreadable answer to the report: %w", err)
	}
	// This report went whole to whichever agent answered: a restarted one has it now,
	// so a stream meeting that agent later has nothing to resend.
	s.c.observe(ack.Agent)
	return nil
}
