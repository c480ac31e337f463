package fuseboxd_test

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/internal/fuseboxd"
	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/kube"
)

// TestBadInputChangesNothing: garbage, oversized bodies, unknown outcomes and paths, and a
// permit settled twice get a clear 4xx with {"error": ...}, and leave the breaker and the
// permit as they were.
func TestBadInputChangesNothing(t *testing.T) {
	d := startDaemon(t, fuseboxd.Options{}, map[string]string{"payments": testConfig("payments", 1, "")})
	p := d.mustAcquire("payments")
	huge := strings.Repeat("x", 10<<20)
	for _, tc := range []struct {
		name, method, path, body string
		want                     int
	}{
		{"garbage outcome body", "POST", "/v1/permits/" + p.Permit, "\x00\xffnot json", 400},
		{"two JSON values", "POST", "/v1/permits/" + p.Permit, `{"outcome":"failure"} {}`, 400},
		{"no body", "POST", "/v1/permits/" + p.Permit, "", 400},
		{"unknown outcome", "POST", "/v1/permits/" + p.Permit, `{"outcome":"meh"}`, 400},
		{"negative duration", "POST", "/v1/permits/" + p.Permit, `{"outcome":"failure","durationMs":-1}`, 400},
		{"10 MB outcome body", "POST", "/v1/permits/" + p.Permit, huge, 413},
		{"10 MB permit body", "POST", "/v1/breakers/payments/permits", huge, 413},
		{"garbage permit body", "POST", "/v1/breakers/payments/permits", "{", 400},
		{"zero lease", "POST", "/v1/breakers/payments/permits", `{"leaseMs":0}`, 400},
		{"invalid breaker name", "POST", "/v1/breakers/Not_A_Name/permits", "", 400},
		{"unknown permit", "POST", "/v1/permits/NOSUCHPERMIT", `{"outcome":"failure"}`, 410},
		{"unknown path", "GET", "/v2/everything", "", 404},
		{"wrong method", "DELETE", "/v1/breakers/payments", "", 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, hdr, body := d.do(tc.method, tc.path, tc.body)
			var e struct{ Error string }
			if code != tc.want || hdr.Get("Content-Type") != "application/json" || json.Unmarshal(body, &e) != nil || e.Error == "" {
				t.Fatalf("%d %s %q, want %d and a JSON error", code, hdr.Get("Content-Type"), body, tc.want)
			}
		})
	}
	if got := d.describe("payments"); got.Counts["calls"] != 0 {
		t.Fatalf("bad requests were recorded: %+v", got)
	}
	if names := d.agent.Registry().Names(); !reflect.DeepEqual(names, []string{"payments"}) {
		t.Fatalf("breakers = %v, want only payments", names)
	}
	// The permit survived all of that, and settles once.
	if code := d.settle(p.Permit, "failure"); code != http.StatusNoContent {
		t.Fatalf("settle: %d", code)
	}
	if code := d.settle(p.Permit, "failure"); code != http.StatusGone {
		t.Fatalf("settle twice: %d, want 410", code)
	}
	if got := d.describe("payments"); got.Counts["calls"] != 1 || got.Counts["failures"] != 1 {
		t.Fatalf("after one settle and a repeat: %+v, want 1 call, 1 failure", got)
	}
}

// TestUnpublishedNameGetsDefaultPolicy: a name no CircuitBreaker publishes gets the
// default policy, as Registry.Get does; a lease asked over ten minutes is capped.
func TestUnpublishedNameGetsDefaultPolicy(t *testing.T) {
	d := startDaemon(t, fuseboxd.Options{MaxBreakers: 2}, nil)
	code, a := d.acquire("inventory", `{"leaseMs": 86400000}`)
	if code != http.StatusCreated || a.LeaseMs != fuseboxd.MaxLease.Milliseconds() {
		t.Fatalf("acquire: %d %+v, want 201 with the lease capped at 10 min", code, a)
	}
	if _, a := d.acquire("inventory", ""); a.LeaseMs != breaker.DefaultPolicy().OpenTimeout.Milliseconds() {
		t.Errorf("default lease = %d ms, want the open timeout", a.LeaseMs)
	}
	got := d.describe("inventory")
	want := kube.ConfigOf("inventory", 0, breaker.DefaultPolicy(), breakerconfig.ScopePod)
	if got.Generation != 0 || got.Policy["openTimeout"] != time.Duration(want.OpenTimeout).String() || got.Policy["minimumThroughput"] != float64(want.MinimumThroughput) || got.Mode != "Enforce" {
		t.Fatalf("unpublished breaker: %+v, want the default policy %+v", got, want)
	}
	// Past MaxBreakers, names nobody published are refused rather than grown without end.
	d.mustAcquire("second")
	if code, a := d.acquire("third", ""); code != http.StatusBadRequest || a.Error == "" {
		t.Fatalf("a third unpublished name with MaxBreakers 2: %d %+v, want 400", code, a)
	}
}

// TestShutdownSettlesAsIgnored: permits outstanding at shutdown count as neither success
// nor failure, and free a probe's slot at once.
func TestShutdownSettlesAsIgnored(t *testing.T) {
	d := startDaemon(t, fuseboxd.Options{}, map[string]string{"payments": testConfig("payments", 1, "")})
	d.do("POST", "/v1/breakers/payments/trip", "")
	d.clock.Advance(30e9)
	d.mustAcquire("payments")
	b, _ := d.agent.Registry().Lookup("payments")
	if _, err := b.Allow(); err == nil {
		t.Fatal("a second probe was admitted while the first runs")
	}
	if err := d.srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d.srv.Outstanding() != 0 {
		t.Fatalf("%d permits outstanding after shutdown", d.srv.Outstanding())
	}
	if b.State() != breaker.HalfOpen || b.Counts() != (breaker.Counts{}) {
		t.Fatalf("after shutdown: %v %+v, want half-open with nothing recorded", b.State(), b.Counts())
	}
	done, err := b.Allow()
	if err != nil {
		t.Fatalf("the probe slot was not freed: %v", err)
	}
	done(nil)
}
