package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/internal/fuseboxd"
)

// acquireOnceEnv makes the test binary a second worker process: it asks the daemon on
// the socket the variable names for a permit on "payments", prints the status and the
// body, and exits (TestMain).
const acquireOnceEnv = "FUSEBOXD_TEST_ACQUIRE_ON"

func acquireOnce(sock string) {
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	resp, err := client.Post("http://fuseboxd/v1/breakers/payments/permits", "application/json", nil)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, strings.TrimSpace(string(body)))
}

// acquireFromAnotherProcess runs acquireOnce in a process of its own and returns what it
// printed.
func acquireFromAnotherProcess(t *testing.T, sock string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), acquireOnceEnv+"="+sock)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the second worker: %v %s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestALeakingWorkerHoldsOnlyItsCap (docs/rbac.md, "permit exhaustion"): against the
// built daemon with its defaults, a worker process that takes permits with ten-minute
// leases and never settles them is refused at its cap as a short-circuit (429
// client_permits_exhausted, the breaker's state), never with a 503 that a client reads
// as "unreachable"; another process still gets its permit; and the breaker's view shows
// what the leaker holds.
func TestALeakingWorkerHoldsOnlyItsCap(t *testing.T) {
	d := startBinary(t, map[string]string{"payments": paymentsConfig})
	for i := range fuseboxd.DefaultMaxPermitsPerClient {
		if code, m := d.post(t, "/v1/breakers/payments/permits", `{"leaseMs":600000}`); code != http.StatusCreated {
			t.Fatalf("leaked permit %d: %d %v, want 201", i+1, code, m)
		}
	}
	code, m := d.post(t, "/v1/breakers/payments/permits", `{"leaseMs":600000}`)
	if code != http.StatusTooManyRequests || m["reason"] != "client_permits_exhausted" || m["state"] != "closed" {
		t.Fatalf("the leaker past its cap of %d: %d %v, want 429 client_permits_exhausted in state closed", fuseboxd.DefaultMaxPermitsPerClient, code, m)
	}

	got := acquireFromAnotherProcess(t, d.sock)
	status, body, _ := strings.Cut(got, " ")
	var p struct{ Permit, State string }
	if status != "201" || json.Unmarshal([]byte(body), &p) != nil || p.Permit == "" || p.State != "closed" {
		t.Fatalf("another worker's acquire while the leaker holds its cap: %s, want 201 and a permit", got)
	}

	resp, err := d.client.Get("http://fuseboxd/v1/breakers/payments")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var view struct {
		Permits struct{ Held, Lapsed, RefusedAtCap int }
	}
	if err := json.NewDecoder(resp.Body).Decode(&view); err != nil {
		t.Fatal(err)
	}
	if want := fuseboxd.DefaultMaxPermitsPerClient + 1; view.Permits.Held != want || view.Permits.RefusedAtCap != 1 || view.Permits.Lapsed != 0 {
		t.Fatalf("permits in the breaker's view: %+v, want %d held, 1 refused at a cap, none lapsed", view.Permits, want)
	}
}

// TestLimitFlags: the built daemon takes its caps and timeouts from flags, refuses a
// value it cannot run with naming the flag, and with them cuts a trickled chunked body
// (attack "slow requests") and refuses a connection over its cap as a short-circuit
// (attack "connections held").
func TestLimitFlags(t *testing.T) {
	for _, args := range [][]string{{"--max-connections", "0"}, {"--max-permits-per-client", "-1"}, {"--request-timeout", "0s"}, {"--idle-timeout", "-1s"}} {
		out, err := exec.Command(fuseboxdBin, append([]string{"serve", "--socket", filepath.Join(t.TempDir(), "s"), "--config-dir", t.TempDir()}, args...)...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), args[0]+" "+args[1]+": must be") {
			t.Errorf("%v: %v %s, want a refusal naming the flag", args, err, out)
		}
	}

	d := startBinary(t, map[string]string{"payments": paymentsConfig}, "--max-connections", "2", "--request-timeout", "300ms")
	trickler, err := net.Dial("unix", d.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer trickler.Close()
	if _, err := io.WriteString(trickler, "POST /v1/breakers/payments/permits HTTP/1.1\r\nHost: fuseboxd\r\nTransfer-Encoding: chunked\r\n\r\n1000\r\n"); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			time.Sleep(20 * time.Millisecond)
			if _, err := trickler.Write([]byte("a")); err != nil {
				return
			}
		}
	}()
	_ = trickler.SetReadDeadline(time.Now().Add(30 * time.Second)) // generous: the deadline is 300 ms
	if got, err := io.ReadAll(trickler); errors.Is(err, os.ErrDeadlineExceeded) || strings.Contains(string(got), " 201 ") {
		t.Fatalf("a trickled chunked body: read %q, %v; want it cut, unanswered", got, err)
	}

	raw := func() (net.Conn, *http.Response) {
		t.Helper()
		conn, err := net.Dial("unix", d.sock)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := io.WriteString(conn, "POST /v1/breakers/payments/permits HTTP/1.1\r\nHost: fuseboxd\r\nContent-Length: 0\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return conn, resp
	}
	// The connections closed so far are counted out once the daemon sees them closed:
	// until then a new one may be refused.
	deadline := time.Now().Add(30 * time.Second)
	for served := 0; served < 2; {
		conn, resp := raw()
		switch {
		case resp.StatusCode == http.StatusCreated:
			served++
		case resp.StatusCode != http.StatusTooManyRequests || time.Now().After(deadline):
			t.Fatalf("acquire within the cap: %s, want 201", resp.Status)
		default:
			_ = conn.Close()
			time.Sleep(10 * time.Millisecond)
		}
	}
	if _, resp := raw(); resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("acquire over the cap: %s, want 429 with Retry-After", resp.Status)
	}
}

// leakThenCall is a PHP worker that leaks a permit, then makes a call through the
// breaker: it prints what call() returned and whether the call ran.
const leakThenCall = `<?php
require getenv('FUSEBOX_AUTOLOAD');
$breaker = (new Fusebox\Client(getenv('FUSEBOX_SOCKET')))->breaker('payments');
if (!($breaker->acquire(600000) instanceof Fusebox\Permit)) {
    fwrite(STDERR, "the leaked acquire was refused\n");
    exit(2);
}
$ran = false;
echo $breaker->call(
    fn (Throwable $cause) => 'fallback ' . ($cause instanceof Fusebox\CircuitOpen ? $cause->state->value . ' ' . $cause->reason : get_class($cause)),
    function () use (&$ran) { $ran = true; return 'called'; },
), $ran ? ' ran' : ' not run', "\n";
`

// TestPHPWorkerAtItsCapRunsTheFallback: the attack end to end. A PHP worker past its
// permit cap is refused with a 429, and the PHP client short-circuits: it runs the
// fallback and not the call, rather than taking the daemon for unreachable and failing
// open (which ran the call unwatched, and with a leak that held every permit, switched
// the pod's breaker off).
func TestPHPWorkerAtItsCapRunsTheFallback(t *testing.T) {
	php, _ := needPHP(t)
	d := startBinary(t, map[string]string{"payments": paymentsConfig}, "--max-permits-per-client", "1")
	autoload, err := filepath.Abs("../../clients/php/autoload.php")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(php, "-r", strings.TrimPrefix(leakThenCall, "<?php\n"))
	cmd.Env = append(os.Environ(), "FUSEBOX_AUTOLOAD="+autoload, "FUSEBOX_SOCKET="+d.sock)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("php: %v\n%s", err, out)
	}
	if got, want := strings.TrimSpace(string(out)), "fallback closed client_permits_exhausted not run"; got != want {
		t.Fatalf("the PHP worker past its cap: %q, want %q", got, want)
	}
}
