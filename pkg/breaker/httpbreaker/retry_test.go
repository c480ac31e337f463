package httpbreaker

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
)

// scriptServer answers with the statuses in order (the last one for ever after), with the
// headers given for each, and records the bodies it received.
type scriptServer struct {
	mu       sync.Mutex
	statuses []int
	headers  []http.Header
	bodies   []string
}

func (s *scriptServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	i := min(len(s.bodies), len(s.statuses)-1)
	s.bodies = append(s.bodies, string(body))
	for k, v := range s.headers[i] {
		w.Header()[k] = v
	}
	s.mu.Unlock()
	w.WriteHeader(s.statuses[i])
	_, _ = io.WriteString(w, http.StatusText(s.statuses[i]))
}

func (s *scriptServer) hits() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.bodies...)
}

func serveScript(t *testing.T, statuses ...int) (*scriptServer, *httptest.Server) {
	t.Helper()
	s := &scriptServer{statuses: statuses, headers: make([]http.Header, len(statuses))}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return s, srv
}

// budgeted is a breaker whose retry budget a test's few retries never spend: its window
// has spanned 10s of a 1,000/s floor.
func budgeted(t *testing.T, rb breaker.RetryBudget) *breaker.Breaker {
	b, clock := newBreaker(t, func(p *breaker.Policy) { p.RetryBudget = &rb })
	clock.Advance(10 * time.Second)
	return b
}

func retryClient(b *breaker.Breaker) *http.Client {
	return &http.Client{Transport: &Transport{Breaker: b, Retry: &Retry{Attempts: 3, Base: time.Millisecond, Max: time.Millisecond}}}
}

func TestTransportRetries(t *testing.T) {
	generous := breaker.RetryBudget{Percent: 100, MinPerSecond: 1000}
	t.Run("an idempotent request is retried until it succeeds", func(t *testing.T) {
		s, srv := serveScript(t, 503, 502, 200)
		b := budgeted(t, generous)
		resp, err := retryClient(b).Get(srv.URL)
		if err != nil || resp.StatusCode != 200 || len(s.hits()) != 3 {
			t.Fatalf("resp %v err %v after %d hits", resp, err, len(s.hits()))
		}
		_ = resp.Body.Close()
		if tr := b.Traffic(); tr.Retries != 2 || tr.Requests != 3 || tr.Accepts != 1 {
			t.Fatalf("Traffic() = %+v: each retry is a call", tr)
		}
	})
	t.Run("off unless set", func(t *testing.T) {
		s, srv := serveScript(t, 503, 200)
		b := budgeted(t, generous)
		resp, err := (&http.Client{Transport: NewTransport(b, nil)}).Get(srv.URL)
		if err != nil || resp.StatusCode != 503 || len(s.hits()) != 1 {
			t.Fatalf("resp %v err %v after %d hits", resp, err, len(s.hits()))
		}
		_ = resp.Body.Close()
	})
	t.Run("a POST only with an Idempotency-Key, a body only with GetBody", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			req    func(url string) *http.Request
			sends  int
			bodies string
		}{
			{"POST", func(u string) *http.Request {
				r, _ := http.NewRequest(http.MethodPost, u, strings.NewReader("x"))
				return r
			}, 1, "x"},
			{"POST with Idempotency-Key", func(u string) *http.Request {
				r, _ := http.NewRequest(http.MethodPost, u, strings.NewReader("order-7"))
				r.Header.Set("Idempotency-Key", "k-7")
				return r
			}, 2, "order-7,order-7"},
			{"PUT with a body it can send again", func(u string) *http.Request {
				r, _ := http.NewRequest(http.MethodPut, u, strings.NewReader("v2"))
				return r
			}, 2, "v2,v2"},
			{"PUT with a body it cannot send again", func(u string) *http.Request {
				r, _ := http.NewRequest(http.MethodPut, u, io.NopCloser(strings.NewReader("v3")))
				return r
			}, 1, "v3"},
		} {
			s, srv := serveScript(t, 500, 204)
			resp, err := retryClient(budgeted(t, generous)).Do(tc.req(srv.URL))
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			_ = resp.Body.Close()
			if got := strings.Join(s.hits(), ","); len(s.hits()) != tc.sends || got != tc.bodies {
				t.Errorf("%s: sent %d times with bodies %q, want %d with %q", tc.name, len(s.hits()), got, tc.sends, tc.bodies)
			}
		}
	})
	t.Run("Retry-After is honoured, and ends the retries beyond the limit", func(t *testing.T) {
		s, srv := serveScript(t, 503, 200)
		s.headers[0] = http.Header{"Retry-After": {"1"}}
		start := time.Now()
		resp, err := retryClient(budgeted(t, generous)).Get(srv.URL)
		if err != nil || resp.StatusCode != 200 || time.Since(start) < time.Second {
			t.Fatalf("resp %v err %v after %v; want 200 after the 1s asked for", resp, err, time.Since(start))
		}
		_ = resp.Body.Close()

		s, srv = serveScript(t, 429, 200)
		s.headers[0] = http.Header{"Retry-After": {"120"}}
		resp, err = retryClient(budgeted(t, generous)).Get(srv.URL)
		if err != nil || resp.StatusCode != 429 || len(s.hits()) != 1 {
			t.Fatalf("resp %v err %v after %d hits; want the 429, not a wait of 2 minutes", resp, err, len(s.hits()))
		}
		_ = resp.Body.Close()
	})
	t.Run("a spent budget hands back the last answer or error", func(t *testing.T) {
		s, srv := serveScript(t, 503, 200)
		resp, err := retryClient(budgeted(t, breaker.RetryBudget{})).Get(srv.URL)
		if err != nil || resp.StatusCode != 503 || len(s.hits()) != 1 {
			t.Fatalf("resp %v err %v after %d hits", resp, err, len(s.hits()))
		}
		if body, _ := io.ReadAll(resp.Body); string(body) != "Service Unavailable" {
			t.Fatalf("the last answer's body was consumed: %q", body)
		}
		_ = resp.Body.Close()

		dead := httptest.NewServer(http.NotFoundHandler())
		dead.Close()
		_, err = retryClient(budgeted(t, breaker.RetryBudget{})).Get(dead.URL)
		if !errors.Is(err, breaker.ErrRetryBudget) {
			t.Fatalf("err %v, want one matching ErrRetryBudget", err)
		}
	})
}

func TestRetryAfterHeader(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		v    string
		want time.Duration
	}{
		{"", 0},
		{"7", 7 * time.Second},
		{" 0 ", 0},
		{"-3", 0},
		{"soon", 0},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
		{"99999999999", 24 * time.Hour},
	} {
		resp := &http.Response{Header: http.Header{}}
		if tc.v != "" {
			resp.Header.Set("Retry-After", tc.v)
		}
		if got := retryAfter(resp, now); got != tc.want {
			t.Errorf("Retry-After %q: %v, want %v", tc.v, got, tc.want)
		}
	}
	e := &StatusError{StatusCode: 503, After: 3 * time.Second}
	// breaker.Retry honours an error with this method.
	if ra, ok := errors.AsType[interface {
		error
		RetryAfter() time.Duration
	}](error(e)); !ok || ra.RetryAfter() != 3*time.Second {
		t.Fatal("StatusError does not carry its Retry-After to breaker.Retry")
	}
}
