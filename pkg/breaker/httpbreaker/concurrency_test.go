package httpbreaker

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
)

// A request over the breaker's concurrency limit is refused without being sent, and never
// retried: on the client the error matches ErrConcurrencyLimited and not ErrOpen; on the
// server it is a 503 that says why, with Retry-After 1.
func TestConcurrencyLimitRefusals(t *testing.T) {
	b, _ := newBreaker(t, func(p *breaker.Policy) { p.MaxInFlight = 1 })
	held, err := b.Allow()
	if err != nil {
		t.Fatal(err)
	}
	defer held(nil)

	var status, hits atomic.Int32
	status.Store(http.StatusOK)
	srv := statusServer(t, &status, &hits)
	client := &http.Client{Transport: &Transport{Breaker: b, Retry: &Retry{Attempts: 3}}}
	_, err = client.Get(srv.URL)
	if !errors.Is(err, breaker.ErrConcurrencyLimited) || errors.Is(err, breaker.ErrOpen) || hits.Load() != 0 {
		t.Errorf("client over the limit: %v, %d requests sent", err, hits.Load())
	}

	rec := httptest.NewRecorder()
	NewHandler(b, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { t.Error("served over the limit") })).
		ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != "1" || !strings.Contains(rec.Body.String(), "concurrency limit") {
		t.Errorf("server over the limit: %d %q %q", rec.Code, rec.Header().Get("Retry-After"), rec.Body.String())
	}
}
