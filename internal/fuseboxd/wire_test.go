package fuseboxd_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/internal/fuseboxd"
)

// wireAnswer is what a client can tell of an answer: the status, the headers the API
// sets, and the body with its permit id (random) replaced.
type wireAnswer struct {
	Status                                             int
	ContentType, ContentLength, RetryAfter, Connection string
	Body                                               string
}

var permitID = regexp.MustCompile(`"permit":"([A-Z2-7]+)"`)

// rawExchange writes raw (all of it: one request or several, pipelined) on a new
// connection to sock, and reads n answers.
func rawExchange(t *testing.T, sock, raw string, n int) ([]wireAnswer, string) {
	t.Helper()
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	go func() { _, _ = io.WriteString(conn, raw) }()
	r := bufio.NewReader(conn)
	var out []wireAnswer
	last := ""
	for range n {
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatalf("reading an answer to %q: %v", raw[:min(len(raw), 80)], err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if m := permitID.FindSubmatch(body); m != nil {
			last = string(m[1])
		}
		out = append(out, wireAnswer{
			Status: resp.StatusCode, ContentType: resp.Header.Get("Content-Type"),
			ContentLength: resp.Header.Get("Content-Length"), RetryAfter: resp.Header.Get("Retry-After"),
			Connection: resp.Header.Get("Connection"),
			Body:       permitID.ReplaceAllString(string(body), `"permit":"ID"`),
		})
	}
	return out, last
}

// TestWireAnswers: the requests serveConn answers by hand and those it hands to
// net/http get, byte for byte, the answers the daemon's net/http handler alone gives,
// in the same sequence against the same breakers: the hand-written HTTP/1.1 changes
// nothing a client can see (docs/design.md §8).
func TestWireAnswers(t *testing.T) {
	configs := map[string]string{"payments": testConfig("payments", 1, `{"minimumThroughput":1000}`)}
	wire := startDaemon(t, fuseboxd.Options{}, configs)
	reference := startDaemonServed(t, fuseboxd.Options{}, configs, (*fuseboxd.Server).ServeNetHTTP)

	post := func(path, headers, body string) string {
		return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: fuseboxd\r\n%sContent-Length: %d\r\n\r\n%s", path, headers, len(body), body)
	}
	get := func(path string) string { return "GET " + path + " HTTP/1.1\r\nHost: fuseboxd\r\n\r\n" }
	const acquire, settle = "/v1/breakers/payments/permits", "/v1/permits/{permit}"
	lastPermit := map[*daemon]string{} // the last permit each daemon issued
	long := "X-Padding: " + strings.Repeat("p", 6000) + "\r\n"
	for _, tc := range []struct {
		name, raw string
		answers   int
	}{
		{"acquire", post(acquire, "", ""), 1},
		{"settle success", post(settle, "Content-Type: application/json\r\n", `{"outcome":"success","durationMs":3}`), 1},
		{"settle again", post(settle, "", `{"outcome":"success"}`), 1},
		{"acquire with a lease", post(acquire, "", ` { "leaseMs" : 5000 } `), 1},
		{"settle with an escape", post(settle, "", `{"outcome":"f\u0061ilure"}`), 1},
		{"lease key in another case", post(acquire, "", `{"LeaseMs":7000}`), 1},
		{"lease as a fraction", post(acquire, "", `{"leaseMs":1.5}`), 1},
		{"lease as an exponent", post(acquire, "", `{"leaseMs":1e3}`), 1},
		{"lease with a leading zero", post(acquire, "", `{"leaseMs":0100}`), 1},
		{"lease of 19 digits", post(acquire, "", `{"leaseMs":1000000000000000000}`), 1},
		{"lease as a string", post(acquire, "", `{"leaseMs":"5000"}`), 1},
		{"lease null", post(acquire, "", `{"leaseMs":null}`), 1},
		{"unknown field", post(acquire, "", `{"lease":5}`), 1},
		{"zero lease", post(acquire, "", `{"leaseMs":0}`), 1},
		{"negative lease", post(acquire, "", `{"leaseMs":-5}`), 1},
		{"two values", post(acquire, "", `{} {}`), 1},
		{"garbage", post(acquire, "", "\x00\xff"), 1},
		{"empty object", post(acquire, "", `{}`), 1},
		{"settle unknown outcome", post(settle, "", `{"outcome":"meh"}`), 1},
		{"settle negative duration", post(settle, "", `{"outcome":"failure","durationMs":-1}`), 1},
		{"settle non-ASCII outcome", post(settle, "", `{"outcome":"échec"}`), 1},
		{"settle no body", post(settle, "", ""), 1},
		{"settle unknown permit", post("/v1/permits/NOSUCH", "", `{"outcome":"failure"}`), 1},
		{"settle truncated", post(settle, "", `{"outcome":"failure"`), 1},
		{"invalid breaker name", post("/v1/breakers/Not_A_Name/permits", "", ""), 1},
		{"escaped path", post("/v1/breakers/pay%6Dents/permits", "", ""), 1},
		{"query", post(acquire+"?x=1", "", ""), 1},
		{"dot segment", post("/v1/breakers/../breakers/payments/permits", "", ""), 1},
		{"empty segment", post("/v1/breakers//permits", "", ""), 1},
		{"trailing slash", post(acquire+"/", "", ""), 1},
		{"chunked", "POST " + acquire + " HTTP/1.1\r\nHost: fuseboxd\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n{\"leaseMs\":9000}\r\n0\r\n\r\n", 1},
		{"HTTP/1.0", "POST " + acquire + " HTTP/1.0\r\nContent-Length: 0\r\n\r\n", 1},
		{"no Host", "POST " + acquire + " HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 1},
		{"Host with a space", "POST " + acquire + " HTTP/1.1\r\nHost: a b\r\nContent-Length: 0\r\n\r\n", 1},
		{"two Hosts", "POST " + acquire + " HTTP/1.1\r\nHost: a\r\nHost: b\r\nContent-Length: 0\r\n\r\n", 1},
		{"Host with a port", "POST " + acquire + " HTTP/1.1\r\nHost: 127.0.0.1:8089\r\nContent-Length: 0\r\n\r\n", 1},
		{"length -0", "POST " + acquire + " HTTP/1.1\r\nHost: x\r\nContent-Length: -0\r\n\r\n", 1},
		{"length +0", "POST " + acquire + " HTTP/1.1\r\nHost: x\r\nContent-Length: +0\r\n\r\n", 1},
		{"header without a colon", "POST " + acquire + " HTTP/1.1\r\nHost: x\r\nContent-Length 0\r\n\r\n", 1},
		{"folded header", "POST " + acquire + " HTTP/1.1\r\nHost: x\r\nX-A: b\r\n c\r\nContent-Length: 0\r\n\r\n", 1},
		{"two lengths", "POST " + acquire + " HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n", 1},
		{"a long header", post(acquire, long, ""), 1},
		{"a body over 64 KiB", post(acquire, "", strings.Repeat(" ", fuseboxd.MaxBody+1)), 1},
		{"a 5 KB body", post(acquire, "", `{"leaseMs":4000}`+strings.Repeat(" ", 5000)), 1},
		{"Connection: close", post(acquire, "Connection: close\r\n", ""), 1},
		{"pipelined", post(acquire, "", "") + get("/v1/breakers/payments") + post(acquire, "", `{"leaseMs":2000}`), 3},
		{"describe", get("/v1/breakers/payments"), 1},
		{"describe unpublished", get("/v1/breakers/inventory"), 1},
		{"healthz", get("/healthz"), 1},
		{"readyz", get("/readyz"), 1},
		{"unknown path", get("/v2/everything"), 1},
		{"wrong method", "DELETE /v1/breakers/payments HTTP/1.1\r\nHost: x\r\n\r\n", 1},
		{"trip", post("/v1/breakers/payments/trip", "", ""), 1},
		{"refused", post(acquire, "", ""), 1},
		{"describe open", get("/v1/breakers/payments"), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got [2][]wireAnswer
			for i, d := range []*daemon{wire, reference} {
				raw := strings.ReplaceAll(tc.raw, "{permit}", lastPermit[d])
				var last string
				got[i], last = rawExchange(t, d.sock, raw, tc.answers)
				if last != "" {
					lastPermit[d] = last
				}
			}
			for i := range got[0] {
				if got[0][i] != got[1][i] {
					t.Errorf("answer %d:\nserveConn %+v\nnet/http  %+v", i, got[0][i], got[1][i])
				}
			}
		})
	}
}

// TestShutdownClosesKeptAliveConnections: Shutdown closes the connections waiting for
// their next request, served by hand or handed to net/http, and returns at once.
func TestShutdownClosesKeptAliveConnections(t *testing.T) {
	d := startDaemon(t, fuseboxd.Options{}, map[string]string{"payments": testConfig("payments", 1, "")})
	lean, err := dialLean(d.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer lean.Close()
	if code, body, err := lean.post([]byte("/v1/breakers/payments/permits"), nil); err != nil || code != http.StatusCreated {
		t.Fatalf("acquire: %d %s %v", code, body, err)
	}
	chunked, err := net.Dial("unix", d.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer chunked.Close()
	if _, err := io.WriteString(chunked, "POST /v1/breakers/payments/permits HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if resp, err := http.ReadResponse(bufio.NewReader(chunked), nil); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("chunked acquire: %v %v", resp, err)
	}

	// A Shutdown that waited for the idle connections to go would wait for its context:
	// this one gives up after a bound no busy machine comes near, and says why.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := d.srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown with only idle connections: %v", err)
	}
	for name, conn := range map[string]net.Conn{"served by hand": lean.conn, "handed to net/http": chunked} {
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := conn.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("the connection %s: read %d, %v after Shutdown, want EOF", name, n, err)
		}
	}
	if d.srv.Outstanding() != 0 {
		t.Errorf("%d permits outstanding after Shutdown", d.srv.Outstanding())
	}
}
