package nodeagent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// noAnswer bounds how long a test waits for an answer the agent owes it: a wait that ends
// here means the agent never answered, not that it was slow.
const noAnswer = 20 * time.Second

// dial opens a raw connection to the agent.
func dial(t *testing.T, a *runningAgent) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", a.addr)
	must(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// answer sends req on c and reads the answer.
func answer(t *testing.T, c net.Conn, req string) (*http.Response, string) {
	t.Helper()
	_, err := io.WriteString(c, req)
	must(t, err)
	must(t, c.SetReadDeadline(time.Now().Add(noAnswer)))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	must(t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

const healthz = "GET " + breakerconfig.AgentHealthPath + " HTTP/1.1\r\nHost: agent\r\n\r\n"

// TestConnectionCap: past the port's cap, a new connection is answered 503 with
// Retry-After and closed, and counted as refused; once a connection closes, its place
// serves again. The cap is lowered to 4 for the test.
func TestConnectionCap(t *testing.T) {
	t.Parallel()
	agent := startAgent(t, newNode(t), agentOptions{port: portLimits{maxConnections: 4}})
	held := make([]net.Conn, 4)
	for i := range held {
		held[i] = dial(t, agent)
		if resp, body := answer(t, held[i], healthz); resp.StatusCode != http.StatusOK {
			t.Fatalf("connection %d: %s %s", i, resp.Status, body)
		}
	}
	refused := agent.Stats().Refused
	resp, body := answer(t, dial(t, agent), healthz)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" || !strings.Contains(body, "serves 4 connections at once") {
		t.Errorf("a fifth connection: %s %q, want 503 with Retry-After naming the cap", resp.Status, body)
	}
	if n := agent.Stats().Refused - refused; n != 1 {
		t.Errorf("%d refusals counted for the connection turned away, want 1", n)
	}
	_ = held[0].Close()
	eventually(t, "a place served again", func() error {
		if resp, body := answer(t, dial(t, agent), healthz); resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s %s", resp.Status, body)
		}
		return nil
	})
}

// TestStalledBodyIsCut: a report whose body stops arriving is cut at the port's body
// deadline: the connection is answered or closed, not held, and nothing is recorded. The
// deadline is lowered to half a second for the test.
func TestStalledBodyIsCut(t *testing.T) {
	t.Parallel()
	node := newNode(t)
	ns := newNamespace(t)
	agent := startAgent(t, node, agentOptions{port: portLimits{readBody: 500 * time.Millisecond}})
	token := podToken(t, newPod(t, ns, "slow", node.Name), breakerconfig.NodeAgentAudience)
	c := dial(t, agent)
	_, err := fmt.Fprintf(c, "PUT %s HTTP/1.1\r\nHost: agent\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"breakers\":[", breakerconfig.AgentReportPath, token)
	must(t, err)
	// The rest of the body never comes. The agent answers what it could not read, or
	// closes the connection; either way the connection ends.
	must(t, c.SetReadDeadline(time.Now().Add(noAnswer)))
	rest, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("a stalled body held the connection for %v", noAnswer)
	}
	if len(rest) > 0 && !strings.HasPrefix(string(rest), "HTTP/1.1 400") {
		t.Errorf("a stalled body answered %q, want 400 or nothing", rest)
	}
	if pods := podsOf(t, agent, ns, ""); len(pods) != 0 {
		t.Errorf("a stalled body recorded %+v", pods)
	}
}

// TestConfigStreamHeartbeatAndStalledReader: a quiet config stream gets heartbeats (empty
// lines) between its snapshots; a pod that stops reading loses its stream once the
// connection's buffers are full and a write waits past its deadline, and the namespace's
// watch stops with it. Heartbeat and deadline are lowered for the test; the pod's socket
// has a small receive buffer so that a few changes fill it.
func TestConfigStreamHeartbeatAndStalledReader(t *testing.T) {
	t.Parallel()
	node := newNode(t)
	ns := newNamespace(t)
	agent := startAgent(t, node, agentOptions{port: portLimits{heartbeat: 50 * time.Millisecond, streamWrite: 300 * time.Millisecond}})
	token := podToken(t, newPod(t, ns, "stalled", node.Name), breakerconfig.NodeAgentAudience)
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return errors.Join(err, serr)
	}}
	c, err := d.Dial("tcp", agent.addr)
	must(t, err)
	defer c.Close()
	_, err = fmt.Fprintf(c, "GET %s?watch=true HTTP/1.1\r\nHost: agent\r\nAuthorization: Bearer %s\r\n\r\n", breakerconfig.AgentConfigPath, token)
	must(t, err)
	must(t, c.SetReadDeadline(time.Now().Add(noAnswer)))
	r := bufio.NewReader(c)
	resp, err := http.ReadResponse(r, nil)
	must(t, err)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream: %s", resp.Status)
	}
	// The snapshot, then heartbeats: the chunked body's lines, read as the pod's decoder
	// reads them. Heartbeats may come first too, while the namespace's new watch lists
	// (slow on a loaded machine).
	lines := bufio.NewReader(resp.Body)
	first := "\n"
	for first == "\n" {
		first, err = lines.ReadString('\n')
		must(t, err)
	}
	if !strings.Contains(first, `"agent":"`+agent.ID()+`"`) {
		t.Fatalf("first line %q, want the snapshot", first)
	}
	for i := range 3 {
		if beat, err := lines.ReadString('\n'); err != nil || beat != "\n" {
			t.Fatalf("line %d after the snapshot: %q %v, want a heartbeat", i+2, beat, err)
		}
	}
	if s := agent.Stats(); s.ConfigStreams != 1 || s.ConfigWatches != 1 {
		t.Fatalf("stats %+v, want one stream and its watch", s)
	}

	// The pod stops reading; the namespace's config keeps changing, each change 256 KiB.
	filler := strings.Repeat("x", 256<<10)
	for gen := 1; agent.Stats().ConfigStreams != 0; gen++ {
		if gen > 64 {
			t.Fatalf("16 MiB of changes sent to a pod that reads nothing, and its stream is still open")
		}
		writeRawConfigMap(t, ns, map[string]string{"filler.json": fmt.Sprintf("%d%s", gen, filler)})
	}
	eventually(t, "the namespace's watch stopped with its stream", func() error {
		if s := agent.Stats(); s.ConfigWatches != 0 {
			return fmt.Errorf("stats %+v", s)
		}
		return nil
	})
}

// writeRawConfigMap makes the namespace's fusebox-breakers ConfigMap hold data.
func writeRawConfigMap(t *testing.T, ns string, data map[string]string) {
	t.Helper()
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: breakerconfig.ConfigMapName}}
	err := k8sClient.Get(ctx, client.ObjectKeyFromObject(cm), cm)
	cm.Data = data
	switch {
	case apierrors.IsNotFound(err):
		err = k8sClient.Create(ctx, cm)
	case err == nil:
		err = k8sClient.Update(ctx, cm)
	}
	must(t, err)
}
