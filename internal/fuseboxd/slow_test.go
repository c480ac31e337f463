package fuseboxd_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/internal/fuseboxd"
)

// heldBound is how long a test waits for the daemon to close a connection it must close
// after a deadline of a few hundred milliseconds: generous, because the machine may be
// busy; a daemon that never closes it fails there.
const heldBound = 30 * time.Second

// waitClosed reads conn until the daemon closes it and returns what it read, or fails
// the test after heldBound.
func waitClosed(t *testing.T, conn net.Conn) []byte {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(heldBound))
	got, err := io.ReadAll(conn)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the daemon held the connection for %v (read %q)", heldBound, got)
	}
	return got // io.EOF, or a reset: the daemon closed it with bytes unread
}

// TestSlowRequestsAreCutAtTheDeadline (docs/rbac.md, attack "slow requests"): a request
// trickled a byte at a time, however long it would go on, is cut once it has taken
// RequestTimeout, on the wire and on net/http (a header over the wire's buffer, a body
// over 4 KiB, a chunked body), and is never answered as if it had arrived.
func TestSlowRequestsAreCutAtTheDeadline(t *testing.T) {
	const timeout = 300 * time.Millisecond
	d := startDaemon(t, fuseboxd.Options{RequestTimeout: timeout}, map[string]string{"payments": testConfig("payments", 1, "")})
	const line = "POST /v1/breakers/payments/permits HTTP/1.1\r\nHost: fuseboxd\r\n"
	for _, tc := range []struct{ name, head string }{
		{"a trickled header, on the wire", line + "X-Slow: "},
		{"a trickled body, on the wire", line + "Content-Length: 1000\r\n\r\n"},
		{"a header over the wire's buffer, then trickled, on net/http", line + "X-Long: " + strings.Repeat("a", 5000)},
		{"a trickled body over 4 KiB, on net/http", line + "Content-Length: 10000\r\n\r\n"},
		{"a trickled chunked body, on net/http", line + "Transfer-Encoding: chunked\r\n\r\n1000\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			conn, err := net.Dial("unix", d.sock)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			start := time.Now()
			if _, err := io.WriteString(conn, tc.head); err != nil {
				t.Fatal(err)
			}
			stop := make(chan struct{})
			defer close(stop)
			go func() {
				tick := time.NewTicker(20 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
						if _, err := conn.Write([]byte("a")); err != nil {
							return // cut
						}
					}
				}
			}()
			got := waitClosed(t, conn)
			if held := time.Since(start); held < timeout {
				t.Errorf("cut after %v, before the deadline of %v", held, timeout)
			}
			if bytes.Contains(got, []byte(" 201 ")) || bytes.Contains(got, []byte(`"permit"`)) {
				t.Errorf("a request that never arrived was answered: %q", got)
			}
		})
	}
	t.Cleanup(func() {
		if n := d.srv.Outstanding(); n != 0 {
			t.Errorf("%d permits outstanding after requests that never arrived", n)
		}
	})
}

// TestIdleConnectionsAreClosed: a connection no request has begun on for IdleTimeout is
// closed, whether it was served by hand, handed to net/http, or never sent a byte; and
// not before.
func TestIdleConnectionsAreClosed(t *testing.T) {
	const idle = 300 * time.Millisecond
	d := startDaemon(t, fuseboxd.Options{IdleTimeout: idle}, map[string]string{"payments": testConfig("payments", 1, "")})
	for _, tc := range []struct{ name, request string }{
		{"served by hand", "GET /healthz HTTP/1.1\r\nHost: fuseboxd\r\n\r\n"},
		{"handed to net/http", "POST /v1/breakers/payments/trip HTTP/1.1\r\nHost: fuseboxd\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"},
		{"never a byte", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// The connection cannot have been idle for longer than since it was opened,
			// or since its request was sent.
			idleSince := time.Now()
			conn, err := net.Dial("unix", d.sock)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			r := bufio.NewReader(conn)
			if tc.request != "" {
				idleSince = time.Now()
				if _, err := io.WriteString(conn, tc.request); err != nil {
					t.Fatal(err)
				}
				resp, err := http.ReadResponse(r, nil)
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode >= 300 || resp.Close {
					t.Fatalf("answer %s, close %v: want a success on a kept-alive connection", resp.Status, resp.Close)
				}
			}
			_ = conn.SetReadDeadline(time.Now().Add(heldBound))
			if n, err := r.Read(make([]byte, 1)); errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("an idle connection was held for %v", heldBound)
			} else if err == nil {
				t.Fatalf("read %d bytes from an idle connection", n)
			}
			if held := time.Since(idleSince); held < idle {
				t.Errorf("closed after %v idle, before the idle timeout of %v", held, idle)
			}
		})
	}
}
