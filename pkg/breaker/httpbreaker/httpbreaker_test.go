package httpbreaker

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakertest"
)

func newBreaker(t *testing.T, mutate ...func(*breaker.Policy)) (*breaker.Breaker, *breakertest.Clock) {
	t.Helper()
	clock := breakertest.NewClock(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
	p := breaker.DefaultPolicy()
	p.MinimumThroughput = 4
	for _, m := range mutate {
		m(&p)
	}
	b, err := breaker.New("http", p, breaker.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	return b, clock
}

// statusServer answers every request with the status in *status and counts what reached it.
func statusServer(t *testing.T, status *atomic.Int32, hits *atomic.Int32) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(int(status.Load()))
		_, _ = io.WriteString(w, "body of "+http.StatusText(int(status.Load())))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// trackedBody records whether it was closed.
type trackedBody struct {
	io.Reader
	closed atomic.Bool
}

func (b *trackedBody) Close() error { b.closed.Store(true); return nil }

func TestTransport(t *testing.T) {
	t.Run("5xx answers are failures; an open circuit sends nothing", func(t *testing.T) {
		var status, hits atomic.Int32
		status.Store(http.StatusBadGateway)
		srv := statusServer(t, &status, &hits)
		b, _ := newBreaker(t)
		client := &http.Client{Transport: NewTransport(b, nil)}
		for range 4 {
			resp, err := client.Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body) // the caller still gets the answer
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(body), "Bad Gateway") {
				t.Fatalf("got %d %q", resp.StatusCode, body)
			}
		}
		if b.State() != breaker.Open {
			t.Fatalf("state %v after 4 failures", b.State())
		}
		body := &trackedBody{Reader: strings.NewReader("payload")}
		req, _ := http.NewRequest(http.MethodPost, srv.URL, body)
		resp, err := client.Do(req)
		if resp != nil || !errors.Is(err, breaker.ErrOpen) {
			t.Fatalf("short-circuit returned %v, %v", resp, err)
		}
		if hits.Load() != 4 {
			t.Fatalf("server saw %d requests, want 4", hits.Load())
		}
		if !body.closed.Load() {
			t.Fatal("the request body of a short-circuited request was not closed")
		}
	})
	t.Run("4xx answers are successes", func(t *testing.T) {
		var status, hits atomic.Int32
		status.Store(http.StatusNotFound)
		srv := statusServer(t, &status, &hits)
		b, _ := newBreaker(t)
		client := &http.Client{Transport: NewTransport(b, nil)}
		for range 10 {
			resp, err := client.Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
		if c := b.Counts(); c != (breaker.Counts{Calls: 10}) || b.State() != breaker.Closed {
			t.Fatalf("counts %+v, state %v", c, b.State())
		}
	})
	t.Run("transport errors are failures", func(t *testing.T) {
		srv := httptest.NewServer(http.NotFoundHandler())
		url := srv.URL
		srv.Close() // nothing listens there any more
		b, _ := newBreaker(t)
		client := &http.Client{Transport: NewTransport(b, nil)}
		for range 4 {
			if _, err := client.Get(url); err == nil || errors.Is(err, breaker.ErrOpen) {
				t.Fatalf("got %v", err)
			}
		}
		if b.State() != breaker.Open {
			t.Fatalf("state %v", b.State())
		}
	})
	t.Run("timeouts are failures, cancellations are neither", func(t *testing.T) {
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-release:
			}
		}))
		t.Cleanup(srv.Close)
		t.Cleanup(func() { close(release) })
		b, _ := newBreaker(t)
		client := &http.Client{Transport: NewTransport(b, nil), Timeout: 20 * time.Millisecond}
		if _, err := client.Get(srv.URL); err == nil {
			t.Fatal("no timeout")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		if _, err := (&http.Client{Transport: NewTransport(b, nil)}).Do(req); err == nil {
			t.Fatal("no deadline")
		}
		if c := b.Counts(); c != (breaker.Counts{Calls: 2, Failures: 2}) {
			t.Fatalf("after two timeouts: %+v", c)
		}
		ctx, cancel = context.WithCancel(context.Background())
		req, _ = http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		go func() { time.Sleep(10 * time.Millisecond); cancel() }()
		if _, err := (&http.Client{Transport: NewTransport(b, nil)}).Do(req); !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v", err)
		}
		if c := b.Counts(); c != (breaker.Counts{Calls: 2, Failures: 2}) {
			t.Fatalf("a cancellation was counted: %+v", c)
		}
	})
	t.Run("the classifier is configurable", func(t *testing.T) {
		var status, hits atomic.Int32
		status.Store(http.StatusTooManyRequests)
		srv := statusServer(t, &status, &hits)
		b, _ := newBreaker(t)
		tr := NewTransport(b, nil)
		tr.IsFailure = func(resp *http.Response, err error) bool {
			return err != nil || resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500
		}
		client := &http.Client{Transport: tr}
		for range 4 {
			resp, err := client.Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
		if b.State() != breaker.Open {
			t.Fatalf("state %v", b.State())
		}
	})
	t.Run("a panicking base transport is a failure and does not hold a probe slot", func(t *testing.T) {
		b, clock := newBreaker(t)
		b.Trip()
		clock.Advance(time.Minute)
		tr := NewTransport(b, roundTripFunc(func(*http.Request) (*http.Response, error) { panic("transport bug") }))
		func() {
			defer func() {
				if r := recover(); r != "transport bug" {
					t.Fatalf("recovered %v", r)
				}
			}()
			_, _ = tr.RoundTrip(httptest.NewRequest(http.MethodGet, "http://example.invalid/", nil))
		}()
		if b.State() != breaker.Open {
			t.Fatalf("a panicking probe left the circuit %v", b.State())
		}
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func serve(h http.Handler, method string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, "/", nil))
	return rec
}

func TestHandler(t *testing.T) {
	t.Run("5xx answers open it; open answers 503 with Retry-After", func(t *testing.T) {
		b, clock := newBreaker(t)
		status := http.StatusInternalServerError
		h := NewHandler(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(status) }))
		for range 4 {
			if rec := serve(h, http.MethodGet); rec.Code != 500 {
				t.Fatalf("got %d", rec.Code)
			}
		}
		clock.Advance(10*time.Second + 500*time.Millisecond)
		rec := serve(h, http.MethodGet)
		if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != "20" {
			t.Fatalf("got %d, Retry-After %q", rec.Code, rec.Header().Get("Retry-After"))
		}
		clock.Advance(19*time.Second + 400*time.Millisecond) // 0.1s left: still says 1, never 0
		if got := serve(h, http.MethodGet).Header().Get("Retry-After"); got != "1" {
			t.Fatalf("Retry-After %q", got)
		}
		clock.Advance(100 * time.Millisecond)
		status = http.StatusOK
		if rec := serve(h, http.MethodGet); rec.Code != http.StatusOK {
			t.Fatalf("probe answered %d", rec.Code)
		}
	})
	t.Run("4xx answers and handlers that write nothing are successes", func(t *testing.T) {
		b, _ := newBreaker(t)
		h := NewHandler(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost {
				http.Error(w, "bad", http.StatusBadRequest)
			}
		}))
		for range 5 {
			serve(h, http.MethodPost)
			serve(h, http.MethodGet)
		}
		if c := b.Counts(); c != (breaker.Counts{Calls: 10}) {
			t.Fatalf("counts %+v", c)
		}
	})
	t.Run("half-open at its probe cap answers 503 with Retry-After 1", func(t *testing.T) {
		b, clock := newBreaker(t)
		b.Trip()
		clock.Advance(time.Minute)
		inside, release := make(chan struct{}), make(chan struct{})
		h := NewHandler(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			close(inside)
			<-release
		}))
		go serve(h, http.MethodGet)
		<-inside
		rec := serve(h, http.MethodGet)
		close(release)
		if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != "1" {
			t.Fatalf("got %d, Retry-After %q", rec.Code, rec.Header().Get("Retry-After"))
		}
	})
	t.Run("a handler stuck in a probe does not wedge the circuit", func(t *testing.T) {
		b, clock := newBreaker(t)
		b.Trip()
		clock.Advance(time.Minute)
		inside, release, finished := make(chan struct{}), make(chan struct{}), make(chan int)
		h := NewHandler(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost {
				close(inside)
				<-release
			}
		}))
		go func() { finished <- serve(h, http.MethodPost).Code }()
		<-inside
		// No answer for openTimeout after the probe was admitted: the circuit re-opens for
		// a new open period instead of answering "probes at their cap" for ever.
		clock.Advance(30 * time.Second)
		rec := serve(h, http.MethodGet)
		if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != "30" {
			t.Fatalf("got %d, Retry-After %q", rec.Code, rec.Header().Get("Retry-After"))
		}
		close(release)
		<-finished
		if b.State() != breaker.Open {
			t.Fatalf("the stuck probe's late answer moved the circuit to %v", b.State())
		}
		clock.Advance(30 * time.Second)
		for range 2 {
			if rec := serve(h, http.MethodGet); rec.Code != http.StatusOK {
				t.Fatalf("probe answered %d", rec.Code)
			}
		}
		if b.State() != breaker.Closed {
			t.Fatalf("state %v after two probe successes", b.State())
		}
	})
	t.Run("forced open says no Retry-After", func(t *testing.T) {
		b, _ := newBreaker(t, func(p *breaker.Policy) { p.Mode = breaker.ModeForcedOpen })
		rec := serve(NewHandler(b, http.NotFoundHandler()), http.MethodGet)
		if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != "" {
			t.Fatalf("got %d, Retry-After %q", rec.Code, rec.Header().Get("Retry-After"))
		}
	})
	t.Run("a custom refusal", func(t *testing.T) {
		b, _ := newBreaker(t)
		b.Trip()
		h := NewHandler(b, http.NotFoundHandler())
		h.Refused = func(w http.ResponseWriter, r *http.Request, err error) {
			if !errors.Is(err, breaker.ErrOpen) {
				t.Errorf("refusal error %v", err)
			}
			w.WriteHeader(http.StatusTooManyRequests)
		}
		if rec := serve(h, http.MethodGet); rec.Code != http.StatusTooManyRequests {
			t.Fatalf("got %d", rec.Code)
		}
	})
	t.Run("a panic is a failure and is re-raised", func(t *testing.T) {
		b, _ := newBreaker(t)
		h := Middleware(b)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("handler bug") }))
		func() {
			defer func() {
				if r := recover(); r != "handler bug" {
					t.Fatalf("recovered %v", r)
				}
			}()
			serve(h, http.MethodGet)
		}()
		if c := b.Counts(); c != (breaker.Counts{Calls: 1, Failures: 1}) {
			t.Fatalf("counts %+v", c)
		}
	})
	t.Run("streaming still works through the wrapper", func(t *testing.T) {
		b, _ := newBreaker(t)
		h := NewHandler(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, "chunk")
			if err := http.NewResponseController(w).Flush(); err != nil {
				t.Errorf("Flush: %v", err)
			}
			w.(http.Flusher).Flush()
		}))
		if rec := serve(h, http.MethodGet); !rec.Flushed {
			t.Fatal("the response was not flushed")
		}
	})
	t.Run("over a real server", func(t *testing.T) {
		b, _ := newBreaker(t)
		b.Trip()
		srv := httptest.NewServer(NewHandler(b, http.NotFoundHandler()))
		t.Cleanup(srv.Close)
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "30" {
			t.Fatalf("got %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	})
}
