package httpbreaker

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/registry"
)

// Transport is an http.RoundTripper that sends requests through a breaker. A request the
// breaker refuses is not sent: RoundTrip closes its body and returns the breaker's error,
// which matches breaker.ErrOpen, or breaker.ErrConcurrencyLimited when the breaker's
// concurrency limit refused it (also through the *url.Error that http.Client wraps it in).
//
// The outcome is recorded when the response headers arrive, not when the body has been
// read: the caller owns the body and may never finish it, and a probe slot held until a
// forgotten Body.Close would wedge a half-open circuit. A body that fails half-way is
// therefore not counted. A Transport is safe for concurrent use.
//
// With Group set, each request goes through the Group's breaker of its key instead, so a
// client that calls many hosts keeps one circuit per host (see [NewGroupTransport]).
type Transport struct {
	// Breaker guards every request. Required unless Group is set.
	Breaker *breaker.Breaker
	// Group, when set, replaces Breaker: a request goes through Group's breaker of
	// Key(req).
	Group *registry.Group
	// Key picks a request's key in Group; nil means ByHost.
	Key func(*http.Request) string
	// Base sends the requests the breaker admits; nil means http.DefaultTransport.
	Base http.RoundTripper
	// IsFailure decides whether a round trip counts against the dependency; nil means
	// IsServerFailure. A request cancelled by its caller is never a failure unless the
	// breaker's own classifier says so.
	IsFailure func(resp *http.Response, err error) bool
	// Retry, when set, retries idempotent requests through the breaker's retry budget
	// (see [Retry]); nil, the default, sends every request once.
	Retry *Retry
}

var _ http.RoundTripper = (*Transport)(nil)

// NewTransport returns a Transport that guards base (nil: http.DefaultTransport) with b.
func NewTransport(b *breaker.Breaker, base http.RoundTripper) *Transport {
	return &Transport{Breaker: b, Base: base}
}

// NewGroupTransport returns a Transport that guards base (nil: http.DefaultTransport) with
// one breaker of g per key(req); key nil means ByHost, one breaker per host.
func NewGroupTransport(g *registry.Group, key func(*http.Request) string, base http.RoundTripper) *Transport {
	return &Transport{Group: g, Key: key, Base: base}
}

// IsServerFailure is the default classifier: transport errors (timeouts, refused or reset
// connections) and 5xx answers are failures; every other answer, 4xx included, is a success.
func IsServerFailure(resp *http.Response, err error) bool {
	if err != nil {
		return true
	}
	return resp.StatusCode >= 500
}

// StatusError is what the breaker is told, and what its observers see, for an answer the
// classifier counted as a failure. The caller still gets the response itself.
type StatusError struct {
	StatusCode int
	// After is how long the answer's Retry-After asked the client to wait; 0 without one.
	After time.Duration
}

// RetryAfter is the wait the answer's Retry-After asked for: [breaker.Retry] honours an error
// with this method.
func (e *StatusError) RetryAfter() time.Duration { return e.After }

func (e *StatusError) Error() string {
	return "httpbreaker: server answered " + strconv.Itoa(e.StatusCode) + " " + http.StatusText(e.StatusCode)
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	b := guard(t.Breaker, t.Group, t.Key, ByHost, req)
	if t.Retry != nil && t.Retry.Attempts > 1 && retriable(req) {
		return t.retry(b, req)
	}
	return t.once(b, req)
}

// once sends req through b.
func (t *Transport) once(b *breaker.Breaker, req *http.Request) (*http.Response, error) {
	done, err := b.Allow()
	if err != nil {
		// RoundTrip must close the request body even when it sends nothing.
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, err
	}
	completed := false
	defer func() {
		if !completed {
			// A panicking base transport must not leave a probe slot taken.
			if v := recover(); v != nil {
				done(errPanicked)
				panic(v)
			}
			done(context.Canceled) // runtime.Goexit
		}
	}()
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	resp, err := base.RoundTrip(req)
	completed = true
	done(t.outcome(resp, err))
	return resp, err
}

// outcome turns a round trip into the error the breaker records.
func (t *Transport) outcome(resp *http.Response, err error) error {
	isFailure := t.IsFailure
	if isFailure == nil {
		isFailure = IsServerFailure
	}
	switch {
	case err != nil && errors.Is(err, context.Canceled):
		// The caller gave up; the breaker's classifier decides (by default: neither).
		return err
	case !isFailure(resp, err):
		return nil
	case err != nil:
		return err
	}
	return &StatusError{StatusCode: resp.StatusCode, After: retryAfter(resp, time.Now())}
}

// errPanicked is the failure recorded for a handler or base transport that panicked; the
// panic itself goes on up the stack.
var errPanicked = errors.New("httpbreaker: panicked")
