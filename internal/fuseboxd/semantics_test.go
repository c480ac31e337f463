package fuseboxd_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/internal/fuseboxd"
)

// The library's semantics (docs/design.md §5), checked through the socket.

// TestOpensOnFailureRateOverMinimumThroughput: §5.1, the circuit opens after a failure
// when the window holds minimumThroughput calls of which failureRatio failed; a refused
// caller gets 429 with Retry-After.
func TestOpensOnFailureRateOverMinimumThroughput(t *testing.T) {
	d := startDaemon(t, fuseboxd.Options{}, map[string]string{"payments": testConfig("payments", 1, "")})
	for range 3 {
		d.call("payments", "failure")
	}
	d.wantState("payments", "closed") // 3 of 3 failed, but fewer than 4 calls
	d.call("payments", "success")
	d.wantState("payments", "closed") // only a failure opens
	d.call("payments", "failure")
	got := d.describe("payments")
	if got.State != "open" || got.Counts["calls"] != 5 || got.Counts["failures"] != 4 {
		t.Fatalf("after 4 failures in 5 calls: %+v, want open on calls 5, failures 4", got)
	}

	code, hdr, body := d.do("POST", "/v1/breakers/payments/permits", "")
	if code != http.StatusTooManyRequests {
		t.Fatalf("acquire on an open circuit: %d %s, want 429", code, body)
	}
	if ra, _ := strconv.Atoi(hdr.Get("Retry-After")); ra != 30 {
		t.Errorf("Retry-After = %q, want 30 (the open timeout, in seconds)", hdr.Get("Retry-After"))
	}
	_, a := d.acquire("payments", "")
	if a.State != "open" || a.Reason != "open" || a.RetryAfterMs != 30000 {
		t.Errorf("refusal = %+v, want state open, reason open, retryAfterMs 30000", a)
	}
	d.clock.Advance(29 * time.Second)
	if _, a := d.acquire("payments", ""); a.RetryAfterMs != 1000 {
		t.Errorf("retryAfterMs 29s into the open period = %d, want 1000", a.RetryAfterMs)
	}
}

// TestProbeCapAndSuccessThreshold: §5.3, at most halfOpenPermittedCalls probes at once,
// successThreshold consecutive successes close, a failed probe re-opens.
func TestProbeCapAndSuccessThreshold(t *testing.T) {
	d := startDaemon(t, fuseboxd.Options{}, map[string]string{"payments": testConfig("payments", 1, "")})
	if code, _, _ := d.do("POST", "/v1/breakers/payments/trip", ""); code != http.StatusNoContent {
		t.Fatalf("trip: %d", code)
	}
	d.wantState("payments", "open")
	d.clock.Advance(30 * time.Second)

	probe := d.mustAcquire("payments")
	if probe.State != "half_open" {
		t.Fatalf("first permit after the open timeout: %+v, want a half_open probe", probe)
	}
	code, a := d.acquire("payments", "")
	if code != http.StatusTooManyRequests || a.State != "half_open" || a.Reason != "half_open_saturated" {
		t.Fatalf("second permit while one probe runs: %d %+v, want 429 half_open_saturated", code, a)
	}
	if code := d.settle(probe.Permit, "success"); code != http.StatusNoContent {
		t.Fatal(code)
	}
	d.wantState("payments", "half_open") // 1 of 2 successes
	d.call("payments", "success")
	d.wantState("payments", "closed")

	d.do("POST", "/v1/breakers/payments/trip", "")
	d.clock.Advance(30 * time.Second)
	d.call("payments", "success")
	d.call("payments", "failure")
	d.wantState("payments", "open") // a failed probe re-opens, whatever came before
}

// TestForcedModes: §5.7, through the published mode.
func TestForcedModes(t *testing.T) {
	d := startDaemon(t, fuseboxd.Options{}, map[string]string{
		"held-open":   testConfig("held-open", 1, `{"mode":"ForcedOpen"}`),
		"held-closed": testConfig("held-closed", 1, `{"mode":"ForcedClosed"}`),
		"watched":     testConfig("watched", 1, `{"mode":"MetricsOnly"}`),
	})
	code, a := d.acquire("held-open", "")
	if code != http.StatusTooManyRequests || a.Reason != "forced_open" || a.State != "open" {
		t.Fatalf("ForcedOpen: %d %+v, want 429 forced_open", code, a)
	}
	for range 10 {
		d.call("held-closed", "failure")
	}
	if got := d.describe("held-closed"); got.State != "closed" || got.Mode != "ForcedClosed" || got.Counts["failures"] != 10 {
		t.Fatalf("ForcedClosed after 10 failures: %+v, want closed, recorded", got)
	}
	for range 4 {
		d.call("watched", "failure")
	}
	d.wantState("watched", "open")
	d.call("watched", "failure") // runs although Enforce would refuse it
}

// TestHotReloadKeepsState: §5.8, a new published policy applies without losing the
// circuit's state, and the generation served follows it.
func TestHotReloadKeepsState(t *testing.T) {
	d := startDaemon(t, fuseboxd.Options{}, map[string]string{"payments": testConfig("payments", 1, "")})
	for range 4 {
		d.call("payments", "failure")
	}
	d.wantState("payments", "open")
	d.writeConfig("payments", testConfig("payments", 2, `{"openTimeout":"1m","minimumThroughput":10}`))
	d.waitFor("generation 2", func() bool { return d.describe("payments").Generation == 2 })
	got := d.describe("payments")
	if got.State != "open" || got.Counts["failures"] != 4 || got.Policy["openTimeout"] != "1m0s" || got.Policy["minimumThroughput"] != float64(10) {
		t.Fatalf("after the reload: %+v, want still open with its tally, on the new policy", got)
	}
	d.clock.Advance(30 * time.Second)
	d.wantState("payments", "open") // its timeout is now a minute, from when it opened
	d.clock.Advance(30 * time.Second)
	d.wantState("payments", "half_open")

	// A document that does not validate is refused; the last good one stays.
	d.writeConfig("payments", testConfig("payments", 3, `{"failureRatio":7}`))
	time.Sleep(300 * time.Millisecond)
	if got := d.describe("payments"); got.Generation != 2 {
		t.Fatalf("after an invalid document: generation %d, want 2 kept", got.Generation)
	}
}
