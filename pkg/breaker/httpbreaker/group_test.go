package httpbreaker

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/registry"
)

func newGroup(t *testing.T, name string) *registry.Group {
	t.Helper()
	p := breaker.DefaultPolicy()
	p.MinimumThroughput = 4
	g, err := registry.NewGroup(name, p)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// get sends a GET and returns the status, or 0 and the error.
func get(t *testing.T, c *http.Client, u string) (int, error) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// TestGroupTransportByHost: a host that fails opens its own circuit; requests to another
// host keep being sent.
func TestGroupTransportByHost(t *testing.T) {
	var badStatus, badHits, goodStatus, goodHits atomic.Int32
	badStatus.Store(http.StatusServiceUnavailable)
	goodStatus.Store(http.StatusOK)
	bad := statusServer(t, &badStatus, &badHits)
	good := statusServer(t, &goodStatus, &goodHits)

	g := newGroup(t, "upstreams")
	client := &http.Client{Transport: NewGroupTransport(g, nil, nil)}
	for range 4 {
		if code, err := get(t, client, bad.URL); code != http.StatusServiceUnavailable {
			t.Fatalf("bad host: %d %v", code, err)
		}
	}
	if _, err := get(t, client, bad.URL); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("bad host after 4 failures: %v, want a short-circuit", err)
	}
	if badHits.Load() != 4 {
		t.Errorf("the bad host got %d requests, want 4", badHits.Load())
	}
	for range 3 {
		if code, err := get(t, client, good.URL); code != http.StatusOK {
			t.Fatalf("good host: %d %v", code, err)
		}
	}
	badHost, goodHost := mustHost(t, bad.URL), mustHost(t, good.URL)
	if b := g.Get(badHost); b.State() != breaker.Open || b.Name() != "upstreams/"+badHost {
		t.Errorf("the bad host's breaker: %s %v", b.Name(), b.State())
	}
	if b := g.Get(goodHost); b.State() != breaker.Closed {
		t.Errorf("the good host's breaker: %v", b.State())
	}
}

func mustHost(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// TestGroupTransportCustomKey: a key function of the caller's (a tenant header here).
func TestGroupTransportCustomKey(t *testing.T) {
	var status, hits atomic.Int32
	status.Store(http.StatusInternalServerError)
	srv := statusServer(t, &status, &hits)
	g := newGroup(t, "tenants")
	byTenant := func(r *http.Request) string { return r.Header.Get("X-Tenant") }
	client := &http.Client{Transport: NewGroupTransport(g, byTenant, nil)}
	send := func(tenant string) error {
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		req.Header.Set("X-Tenant", tenant)
		resp, err := client.Do(req)
		if err == nil {
			_ = resp.Body.Close()
		}
		return err
	}
	for range 4 {
		if err := send("acme"); err != nil {
			t.Fatal(err)
		}
	}
	if err := send("acme"); !errors.Is(err, breaker.ErrOpen) {
		t.Errorf("acme: %v, want a short-circuit", err)
	}
	if err := send("globex"); err != nil {
		t.Errorf("globex: %v, want the request sent", err)
	}
	if s := g.Summary(); s.Keys != 2 || len(s.Worst) != 1 || s.Worst[0] != "acme" {
		t.Errorf("summary %+v, want acme open and globex closed", s)
	}
}

// routes is a mux with a failing route and a healthy one.
func routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /reports/{id}", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "report store down", http.StatusInternalServerError)
	})
	mux.HandleFunc("GET /items/{id}", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "item "+r.PathValue("id"))
	})
	return mux
}

// TestGroupHandlerByRoute: a route that fails sheds its own load with 503; the other route
// keeps serving. Both ways of keying by route: a breaker Handler on each route (ByPattern),
// and one in front of the whole mux (ByMuxPattern).
func TestGroupHandlerByRoute(t *testing.T) {
	perRoute := func(g *registry.Group) http.Handler {
		inner := routes()
		mux := http.NewServeMux()
		for _, pattern := range []string{"GET /reports/{id}", "GET /items/{id}"} {
			mux.Handle(pattern, NewGroupHandler(g, nil, inner))
		}
		return mux
	}
	wrapped := func(g *registry.Group) http.Handler {
		mux := routes()
		return GroupMiddleware(g, ByMuxPattern(mux))(mux)
	}
	for name, build := range map[string]func(*registry.Group) http.Handler{"ByPattern": perRoute, "ByMuxPattern": wrapped} {
		t.Run(name, func(t *testing.T) {
			g := newGroup(t, "routes")
			srv := httptest.NewServer(build(g))
			t.Cleanup(srv.Close)
			for i := range 4 {
				if code, err := get(t, srv.Client(), srv.URL+"/reports/"+strings.Repeat("x", i+1)); code != http.StatusInternalServerError {
					t.Fatalf("reports: %d %v", code, err)
				}
			}
			resp, err := srv.Client().Get(srv.URL + "/reports/9")
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
				t.Errorf("reports after 4 failures: %d, Retry-After %q; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
			}
			if code, err := get(t, srv.Client(), srv.URL+"/items/7"); code != http.StatusOK {
				t.Errorf("items: %d %v, want served", code, err)
			}
			if s := g.Summary(); s.Keys != 2 || len(s.Worst) != 1 || s.Worst[0] != "GET /reports/{id}" {
				t.Errorf("summary %+v, want one key per route pattern, the reports' open", s)
			}
		})
	}
}
