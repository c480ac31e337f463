package fuseboxd_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/internal/fuseboxd"
)

// limitedConfig is a document whose pod's share of a concurrency limit is share (no pod
// counted yet: the whole of it), waiting maxWait for a slot.
func limitedConfig(share int, maxWait string) string {
	return testConfig("payments", 1, `{"concurrency":{"share":`+itoa(share)+`,"pods":0,"generation":1,"maxWait":"`+maxWait+`"}}`)
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// A breaker's concurrency limit counts the permits held (docs/design.md §12): past it an
// acquire is a 429 whose reason is concurrency, the circuit closed and nothing recorded;
// a settled permit gives its slot back; GET shows the limit in force and its figures.
func TestPermitsCountAgainstTheConcurrencyLimit(t *testing.T) {
	d := startDaemon(t, fuseboxd.Options{}, map[string]string{"payments": limitedConfig(2, "0s")})
	first, second := d.mustAcquire("payments"), d.mustAcquire("payments")
	code, hdr, body := d.do("POST", "/v1/breakers/payments/permits", "")
	if code != http.StatusTooManyRequests {
		t.Fatalf("a third permit of two: %d %s, want 429", code, body)
	}
	var refused permitAnswer
	if err := json.Unmarshal(body, &refused); err != nil {
		t.Fatal(err)
	}
	if refused.Reason != "concurrency" || refused.State != "closed" || refused.RetryAfterMs != 100 || hdr.Get("Retry-After") != "1" {
		t.Errorf("refusal %+v, Retry-After %q: want reason concurrency, state closed, retryAfterMs 100, Retry-After 1", refused, hdr.Get("Retry-After"))
	}
	got := d.describeLimited("payments")
	if got.Concurrency == nil || *got.Concurrency != (concurrencyFigures{Limit: 2, InFlightPeak: 2, Limited: 1}) {
		t.Errorf("concurrency %+v, want limit 2, peak 2, limited 1", got.Concurrency)
	}
	if c, _ := got.Policy["concurrency"].(map[string]any); c["share"] != 2.0 || c["pods"] != 0.0 {
		t.Errorf("the published division %v", got.Policy["concurrency"])
	}
	if got.Counts["calls"] != 0 || got.State != "closed" {
		t.Errorf("a refusal of the limit recorded something: %+v", got)
	}
	if code := d.settle(first.Permit, "success"); code != http.StatusNoContent {
		t.Fatalf("settle: %d", code)
	}
	third := d.mustAcquire("payments")
	d.settle(second.Permit, "success")
	d.settle(third.Permit, "failure")
	if c := d.describe("payments").Counts; c["calls"] != 3 {
		t.Errorf("three calls ran, counts %v", c)
	}
}

// A permit that lapses gives its slot back: a client that dies holding permits cannot
// take the pod's share of the fleet's limit away for good.
func TestALapsedPermitGivesItsSlotBack(t *testing.T) {
	d := startDaemon(t, fuseboxd.Options{ExpiryInterval: 10 * time.Millisecond}, map[string]string{"payments": limitedConfig(1, "0s")})
	code, leaked := d.acquire("payments", `{"leaseMs": 1000}`)
	if code != http.StatusCreated {
		t.Fatalf("acquire: %d %+v", code, leaked)
	}
	if code, a := d.acquire("payments", ""); code != http.StatusTooManyRequests || a.Reason != "concurrency" {
		t.Fatalf("a second permit of one: %d %+v", code, a)
	}
	d.clock.Advance(time.Second)
	d.waitFor("the lease to lapse", func() bool { return d.srv.Outstanding() == 0 })
	if code := d.settle(leaked.Permit, "success"); code != http.StatusGone {
		t.Fatalf("settling a lapsed permit: %d, want 410", code)
	}
	p := d.mustAcquire("payments")
	d.settle(p.Permit, "success")
	if c := d.describe("payments").Counts; c["calls"] != 1 {
		t.Errorf("the lapsed call was recorded: counts %v", c)
	}
}

// With maxWait an acquire over the limit waits for a slot, and gets the one a settle
// frees.
func TestAnAcquireWaitsForASlot(t *testing.T) {
	d := startDaemon(t, fuseboxd.Options{}, map[string]string{"payments": limitedConfig(1, "10s")})
	held := d.mustAcquire("payments")
	waited := make(chan permitAnswer, 1)
	go func() {
		_, a := d.acquire("payments", "")
		waited <- a
	}()
	d.waitFor("the second acquire to wait", func() bool { return d.srv.Outstanding() == 1 })
	select {
	case a := <-waited:
		t.Fatalf("the second acquire was answered while the slot was held: %+v", a)
	case <-time.After(50 * time.Millisecond):
	}
	d.settle(held.Permit, "success")
	if a := <-waited; a.Permit == "" {
		t.Fatalf("the waiting acquire: %+v, want the freed slot", a)
	}
}

type concurrencyFigures struct {
	Limit        int    `json:"limit"`
	InFlightPeak int64  `json:"inFlightPeak"`
	Limited      int64  `json:"limited"`
	Baseline     string `json:"baseline"`
}

type limitedBreaker struct {
	describedBreaker
	Concurrency *concurrencyFigures `json:"concurrency"`
}

func (d *daemon) describeLimited(name string) limitedBreaker {
	d.t.Helper()
	code, _, b := d.do("GET", "/v1/breakers/"+name, "")
	if code != http.StatusOK {
		d.t.Fatalf("GET %s: %d %s", name, code, b)
	}
	var out limitedBreaker
	if err := json.Unmarshal(b, &out); err != nil {
		d.t.Fatal(err)
	}
	return out
}
