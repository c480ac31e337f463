package fuseboxd_test

import (
	"net/http"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/internal/fuseboxd"
)

// TestLeakedProbeReopens: a client that takes a probe and dies cannot wedge the breaker.
// Its permit lapses (a late settle gets 410 and changes nothing), and the half-open
// period re-opens once no probe outcome arrived for openTimeout (§5.3).
func TestLeakedProbeReopens(t *testing.T) {
	d := startDaemon(t, fuseboxd.Options{ExpiryInterval: 10 * time.Millisecond}, map[string]string{"payments": testConfig("payments", 1, "")})
	d.do("POST", "/v1/breakers/payments/trip", "")
	d.clock.Advance(30 * time.Second)
	code, leaked := d.acquire("payments", `{"leaseMs": 5000}`)
	if code != http.StatusCreated || leaked.LeaseMs != 5000 || leaked.State != "half_open" {
		t.Fatalf("probe: %d %+v", code, leaked)
	}
	d.clock.Advance(5 * time.Second)
	d.waitFor("the lease to lapse", func() bool { return d.srv.Outstanding() == 0 })
	if code := d.settle(leaked.Permit, "success"); code != http.StatusGone {
		t.Fatalf("settling a lapsed permit: %d, want 410", code)
	}
	d.wantState("payments", "half_open") // the slot is held until the library's rule frees it
	d.clock.Advance(25 * time.Second)
	d.wantState("payments", "open")
	d.clock.Advance(30 * time.Second)
	d.call("payments", "success")
	d.call("payments", "success")
	d.wantState("payments", "closed")
}

// TestTenThousandLeakedPermits: clients that never settle cost bounded memory, lapse, and
// leave a closed circuit as it was; past MaxPermits, acquiring is refused as a
// short-circuit (429, permits_exhausted) and changes nothing.
func TestTenThousandLeakedPermits(t *testing.T) {
	const leaked = 10_000
	// One process leaks them all (its connections are one client), and may fill the table.
	d := startDaemon(t, fuseboxd.Options{ExpiryInterval: 20 * time.Millisecond, MaxPermits: leaked, MaxPermitsPerClient: 2 * leaked},
		map[string]string{"payments": testConfig("payments", 1, "")})
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()

	var wg sync.WaitGroup
	errs := make(chan string, leaked)
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < leaked; i += 16 {
				code, _, body := d.do("POST", "/v1/breakers/payments/permits", `{"leaseMs": 600000}`)
				if code != http.StatusCreated {
					errs <- string(body)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatalf("acquire: %s", e)
	}
	if n := d.srv.Outstanding(); n != leaked {
		t.Fatalf("outstanding = %d, want %d", n, leaked)
	}
	// The in-process client and server share this heap; both are included.
	if grown := int64(heap()) - int64(before); grown > leaked*2048 {
		t.Errorf("heap grew %d bytes for %d permits, over 2 KiB each", grown, leaked)
	} else {
		t.Logf("heap grew %d bytes for %d leaked permits (%d per permit)", grown, leaked, grown/leaked)
	}
	if code, a := d.acquire("payments", ""); code != http.StatusTooManyRequests || a.Reason != "permits_exhausted" || a.State != "closed" {
		t.Fatalf("acquire past MaxPermits: %d %+v, want 429 permits_exhausted in state closed", code, a)
	}
	if got := d.describe("payments"); got.State != "closed" || got.Counts["calls"] != 0 || got.Permits != (permitFigures{Held: leaked, RefusedAtCap: 1}) {
		t.Fatalf("after %d leaked permits: %+v, want closed with no calls recorded, %d held and one refused", leaked, got, leaked)
	}

	d.clock.Advance(fuseboxd.MaxLease)
	d.waitFor("every lease to lapse", func() bool { return d.srv.Outstanding() == 0 })
	// The 16 kept-alive connections hold about 16 KiB of buffers each, client and server
	// side: close them, so that what remains is what the permits left behind.
	d.client.CloseIdleConnections()
	var grown int64
	d.waitFor("the heap to come back within 256 KiB of the start once every permit lapsed", func() bool {
		grown = int64(heap()) - int64(before)
		return grown <= 256<<10
	})
	t.Logf("heap %d bytes over the start once every permit lapsed", grown)
	d.call("payments", "success")
	if got := d.describe("payments"); got.State != "closed" || got.Counts["calls"] != 1 || got.Permits != (permitFigures{Lapsed: leaked, RefusedAtCap: 1}) {
		t.Fatalf("after the leaked permits lapsed: %+v, want closed with the one settled call and %d lapsed", got, leaked)
	}
}
