package fuseboxd_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/internal/fuseboxd"
	"github.com/fusebox-dev/fusebox/internal/testutil"
)

// leanAcquire asks for a permit on c with a ten-minute lease, as a leaking client does.
func leanAcquire(t *testing.T, c *leanClient, name string) (int, permitAnswer) {
	t.Helper()
	code, body, err := c.post([]byte("/v1/breakers/"+name+"/permits"), []byte(`{"leaseMs":600000}`))
	if err != nil {
		t.Fatalf("acquire %s: %v", name, err)
	}
	var a permitAnswer
	if err := json.Unmarshal(body, &a); err != nil {
		t.Fatalf("acquire %s: %d %q: %v", name, code, body, err)
	}
	return code, a
}

// wantCapRefusal fails the test unless the answer is the short-circuit a cap gives: 429
// with the breaker's state, the reason, a retry after a second, and Retry-After.
func wantCapRefusal(t *testing.T, c *leanClient, code int, a permitAnswer, state, reason string) {
	t.Helper()
	if code != http.StatusTooManyRequests || a.State != state || a.Reason != reason || a.RetryAfterMs != 1000 || c.retryAfter != "1" {
		t.Fatalf("answer %d %+v (Retry-After %q), want 429 {state %s, reason %s, retryAfterMs 1000} and Retry-After 1",
			code, a, c.retryAfter, state, reason)
	}
}

// TestALeakingClientCannotBlindTheBreaker (docs/rbac.md, attack "permit exhaustion"): a
// client that takes permits and never settles them holds at most its cap, and the
// others still get permits; when leakers fill the daemon's table, every acquire is
// refused as a short-circuit (429, the breaker's real state), never with the 503 a
// client reads as "unreachable" and fails open on. The leak shows in the breaker's
// view, and when the leases lapse everything is as before. Over loopback TCP a client
// is a connection.
func TestALeakingClientCannotBlindTheBreaker(t *testing.T) {
	d := startDaemon(t, fuseboxd.Options{MaxPermits: 20, MaxPermitsPerClient: 8, ExpiryInterval: 10 * time.Millisecond},
		map[string]string{"payments": testConfig("payments", 1, "")})
	addr := d.serveLoopback()
	dial := func() *leanClient {
		c, err := dialLeanNet("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	leak := func(c *leanClient, n int) {
		t.Helper()
		for i := range n {
			if code, a := leanAcquire(t, c, "payments"); code != http.StatusCreated {
				t.Fatalf("leaked permit %d: %d %+v, want 201", i+1, code, a)
			}
		}
	}
	honest := dial()
	honestCall := func() {
		t.Helper()
		code, body, err := honest.post([]byte("/v1/breakers/payments/permits"), nil)
		if err != nil || code != http.StatusCreated {
			t.Fatalf("the honest client's acquire: %d %s %v, want 201", code, body, err)
		}
		if code, body, err := honest.post([]byte("/v1/permits/"+string(permitOf(body))), []byte(settleSuccess)); err != nil || code != http.StatusNoContent {
			t.Fatalf("the honest client's settle: %d %s %v, want 204", code, body, err)
		}
	}

	leaker := dial()
	leak(leaker, 8)
	code, a := leanAcquire(t, leaker, "payments")
	wantCapRefusal(t, leaker, code, a, "closed", "client_permits_exhausted")
	honestCall() // the leaker holds its cap; the others are served

	// Two more leakers fill the table of 20: every client is refused, as a short-circuit.
	leak(dial(), 8)
	third := dial()
	leak(third, 4)
	code, a = leanAcquire(t, third, "payments")
	wantCapRefusal(t, third, code, a, "closed", "permits_exhausted")
	code, body, err := honest.post([]byte("/v1/breakers/payments/permits"), nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal(body, &a)
	wantCapRefusal(t, honest, code, a, "closed", "permits_exhausted")
	got := d.describe("payments")
	if want := (permitFigures{Held: 20, RefusedAtCap: 3}); got.Permits != want || got.State != "closed" || got.Counts["calls"] != 1 {
		t.Fatalf("the breaker's view: %+v, want closed, the honest call recorded, permits %+v", got, want)
	}

	d.clock.Advance(fuseboxd.MaxLease)
	d.waitFor("the leaked permits to lapse", func() bool { return d.srv.Outstanding() == 0 })
	if got := d.describe("payments").Permits; got != (permitFigures{Lapsed: 20, RefusedAtCap: 3}) {
		t.Fatalf("permits once the leases lapsed: %+v, want 20 lapsed, none held", got)
	}
	leak(leaker, 8) // the cap is the leaker's again
	honestCall()
}

// TestConnectionsOfOneProcessShareItsCap: on the Unix socket a client is the process
// (SO_PEERCRED), so a worker that leaks on a new connection each time is still held to
// one cap; a connection over loopback TCP is a client of its own.
func TestConnectionsOfOneProcessShareItsCap(t *testing.T) {
	d := startDaemon(t, fuseboxd.Options{MaxPermitsPerClient: 3}, map[string]string{"payments": testConfig("payments", 1, "")})
	addr := d.serveLoopback()
	var held []string
	for i := range 3 {
		c, err := dialLean(d.sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		code, a := leanAcquire(t, c, "payments")
		if code != http.StatusCreated {
			t.Fatalf("permit %d, on a connection of its own: %d %+v", i+1, code, a)
		}
		held = append(held, a.Permit)
	}
	c, err := dialLean(d.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	code, a := leanAcquire(t, c, "payments")
	wantCapRefusal(t, c, code, a, "closed", "client_permits_exhausted")

	tcp, err := dialLeanNet("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	if code, a := leanAcquire(t, tcp, "payments"); code != http.StatusCreated {
		t.Fatalf("acquire over loopback TCP: %d %+v, want 201 (a connection of its own)", code, a)
	}
	if got := d.describe("payments").Permits; got != (permitFigures{Held: 4, RefusedAtCap: 1}) {
		t.Fatalf("permits: %+v, want 4 held, 1 refused", got)
	}
	// The cap counts the permits held: one settled makes room for one more.
	if code := d.settle(held[0], "success"); code != http.StatusNoContent {
		t.Fatalf("settle: %d", code)
	}
	if code, a := leanAcquire(t, c, "payments"); code != http.StatusCreated {
		t.Fatalf("acquire once a permit was settled: %d %+v, want 201", code, a)
	}
	code, a = leanAcquire(t, c, "payments")
	wantCapRefusal(t, c, code, a, "closed", "client_permits_exhausted")

	// Refused in half-open, the process says so with the breaker's state, and the probe
	// it was admitted for goes to the next client at once.
	d.do("POST", "/v1/breakers/payments/trip", "")
	d.clock.Advance(30 * time.Second)
	code, a = leanAcquire(t, c, "payments")
	wantCapRefusal(t, c, code, a, "half_open", "client_permits_exhausted")
	if code, a := leanAcquire(t, tcp, "payments"); code != http.StatusCreated || a.State != "half_open" {
		t.Fatalf("the next client's acquire: %d %+v, want the probe, 201 half_open", code, a)
	}
}

// TestACapReachedIsLogged: the daemon says in its log that a client reached its cap,
// naming it, once however often the client is refused (at most once a minute), so that
// a leak is found from the pod's logs without flooding them.
func TestACapReachedIsLogged(t *testing.T) {
	var log testutil.SyncBuffer
	d := startDaemon(t, fuseboxd.Options{MaxPermitsPerClient: 1, Logger: slog.New(slog.NewJSONHandler(&log, nil))},
		map[string]string{"payments": testConfig("payments", 1, "")})
	d.mustAcquire("payments")
	for range 5 {
		if code, a := d.acquire("payments", ""); code != http.StatusTooManyRequests || a.Reason != "client_permits_exhausted" {
			t.Fatalf("acquire past the cap: %d %+v", code, a)
		}
	}
	var lines []string
	for line := range strings.Lines(log.String()) {
		if strings.Contains(line, "as many permits as it may") {
			lines = append(lines, line)
		}
	}
	if len(lines) != 1 || !strings.Contains(lines[0], `"level":"WARN"`) || !strings.Contains(lines[0], `"client":"process `) || !strings.Contains(lines[0], `"breaker":"payments"`) {
		t.Fatalf("log lines about the cap: %q, want one warning naming the process and the breaker", lines)
	}
}
