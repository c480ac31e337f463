package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"

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
