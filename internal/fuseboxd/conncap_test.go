package fuseboxd_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/fusebox-dev/fusebox/internal/fuseboxd"
)

// TestConnectionsOverTheCapAreRefused (docs/rbac.md, attack "connections held"): with
// MaxConnections open, a new connection gets one answer and is closed: an acquire is
// refused as a short-circuit (429 connections_exhausted with the breaker's state), which
// a client can tell from a dead daemon; a settle is still served, so no outcome is lost;
// a request the wire cannot read gets a 503 naming the cap. Past the refusals in
// progress a connection is closed unanswered. A place freed is served again.
func TestConnectionsOverTheCapAreRefused(t *testing.T) {
	const maxConns = 3
	d := startDaemon(t, fuseboxd.Options{MaxConnections: maxConns}, map[string]string{"payments": testConfig("payments", 1, "")})
	// The test's HTTP client holds a connection from waiting for the daemon: the daemon
	// counts it out once it sees it closed.
	d.client.CloseIdleConnections()
	var held []*leanClient
	var permits []string
	refused := 0 // acquires over the cap so far, refused
	for len(held) < maxConns {
		d.waitFor("a connection within the cap to be served", func() bool {
			c, err := dialLean(d.sock)
			if err != nil {
				t.Fatal(err)
			}
			code, a := leanAcquire(t, c, "payments")
			if code != http.StatusCreated {
				refused++
				_ = c.Close()
				return false
			}
			t.Cleanup(func() { _ = c.Close() })
			held, permits = append(held, c), append(permits, a.Permit)
			return true
		})
	}

	// once sends raw on a new connection and returns its one answer, checking that the
	// daemon closes the connection after it.
	once := func(raw string) (*http.Response, []byte) {
		t.Helper()
		conn, err := net.Dial("unix", d.sock)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := io.WriteString(conn, raw); err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(conn)
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatalf("no answer over the cap to %q: %v", raw[:min(len(raw), 60)], err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !resp.Close {
			t.Errorf("the answer over the cap says the connection stays open")
		}
		if rest := waitClosed(t, conn); len(rest) > 0 {
			t.Errorf("after the answer: %q", rest)
		}
		return resp, body
	}
	post := func(path, body string) string {
		return "POST " + path + " HTTP/1.1\r\nHost: fuseboxd\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	}

	resp, body := once(post("/v1/breakers/payments/permits", ""))
	var a permitAnswer
	_ = json.Unmarshal(body, &a)
	if resp.StatusCode != http.StatusTooManyRequests || a.State != "closed" || a.Reason != "connections_exhausted" || a.RetryAfterMs != 1000 || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("acquire over the cap: %s %s, want 429 connections_exhausted in state closed", resp.Status, body)
	}
	chunked := "POST /v1/breakers/payments/permits HTTP/1.1\r\nHost: fuseboxd\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
	if resp, body := once(chunked); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a chunked acquire over the cap: %s %s, want 429", resp.Status, body)
	}
	if resp, body := once(post("/v1/permits/"+permits[0], settleSuccess)); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("settle over the cap: %s %s, want 204", resp.Status, body)
	}
	chunkedSettle := "POST /v1/permits/" + permits[1] + " HTTP/1.1\r\nHost: fuseboxd\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
	if resp, body := once(chunkedSettle); resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "connections") {
		t.Fatalf("a request the wire cannot read over the cap: %s %s, want 503 naming the cap", resp.Status, body)
	}
	refused += 2
	resp, body = once("GET /v1/breakers/payments HTTP/1.1\r\nHost: fuseboxd\r\n\r\n")
	var view describedBreaker
	if err := json.Unmarshal(body, &view); resp.StatusCode != http.StatusOK || err != nil || view.Permits != (permitFigures{Held: 2, RefusedAtCap: int64(refused)}) {
		t.Fatalf("describe over the cap: %s %s, want 200 with 2 held and %d refused at a cap", resp.Status, body, refused)
	}

	// Refusals in progress are bounded too: connections that send nothing fill the lane,
	// and the next one is closed unanswered.
	var silent []net.Conn
	for range fuseboxd.RefusalLane {
		conn, err := net.Dial("unix", d.sock)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		silent = append(silent, conn)
	}
	dropped, err := net.Dial("unix", d.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer dropped.Close()
	_, _ = io.WriteString(dropped, post("/v1/breakers/payments/permits", ""))
	if got := waitClosed(t, dropped); len(got) != 0 {
		t.Fatalf("a connection past the refusal lane was answered: %q", got)
	}

	for _, conn := range silent {
		_ = conn.Close()
	}

	// A place freed is a place served.
	_ = held[0].Close()
	d.waitFor("a connection to be served again once one closed", func() bool {
		c, err := dialLean(d.sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		code, _, err := c.post([]byte("/v1/breakers/payments/permits"), nil)
		return err == nil && code == http.StatusCreated
	})
}
