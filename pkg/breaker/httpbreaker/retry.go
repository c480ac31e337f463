package httpbreaker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
)

// Retry makes a [Transport] retry idempotent requests that failed, each retry drawn from the
// breaker's retry budget (docs/design.md §5.15) and made as a call like any other: never
// while the circuit is open, and counted in its window. It is off unless set.
//
// A request is retried only when sending it twice is safe and possible: its method is GET,
// HEAD, OPTIONS, TRACE, PUT or DELETE, or it carries an Idempotency-Key header; and it has
// no body, or a GetBody to send the body again (http.NewRequest sets it for in-memory
// bodies). An attempt is retried when the breaker counted it as a failure (by default a
// transport error or a 5xx answer) or when the answer is 429 Too Many Requests; never when
// the breaker refused it or the caller cancelled. Between attempts the transport waits what
// the answer's Retry-After asks (seconds or an HTTP date), or else a fully jittered
// exponential backoff; a Retry-After beyond MaxRetryAfter ends the retries.
//
// When the budget refuses a retry, the circuit has opened, or the attempts are used up, the
// last attempt is what the caller gets: its answer, whose body is still unread, or its
// error, which for a budget refusal matches breaker.ErrRetryBudget as well.
type Retry struct {
	// Attempts is how many times a request may be sent in all, the first included; below
	// 2 nothing is retried.
	Attempts int
	// Base and Max bound the backoff: the n-th retry waits a random time up to min(Base ×
	// 2^(n-1), Max). 0 means 50ms and 2s.
	Base, Max time.Duration
	// MaxRetryAfter is the longest Retry-After honoured; 0 means 30s.
	MaxRetryAfter time.Duration
}

// retriable reports whether req may be sent more than once.
func retriable(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, "", http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
	default:
		if req.Header.Get("Idempotency-Key") == "" {
			return false
		}
	}
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

func (t *Transport) retry(b *breaker.Breaker, req *http.Request) (*http.Response, error) {
	r := *t.Retry
	if r.Base <= 0 {
		r.Base = 50 * time.Millisecond
	}
	if r.Max <= 0 {
		r.Max = 2 * time.Second
	}
	if r.MaxRetryAfter <= 0 {
		r.MaxRetryAfter = 30 * time.Second
	}
	for n := 1; ; n++ {
		resp, err := t.once(b, req)
		if n >= r.Attempts || !t.worthRetrying(resp, err) || req.Context().Err() != nil {
			return resp, err
		}
		wait := r.backoff(n)
		if resp != nil {
			if d := retryAfter(resp, time.Now()); d > r.MaxRetryAfter {
				return resp, nil
			} else if d > 0 {
				wait = d
			}
		}
		if !b.AllowRetry() {
			if err != nil && b.State() != breaker.Open {
				return nil, fmt.Errorf("breaker %q: %w; last attempt: %w", b.Name(), breaker.ErrRetryBudget, err)
			}
			return resp, err
		}
		next, gerr := rewound(req)
		if gerr != nil {
			// The body cannot be sent again: the caller gets the last attempt.
			return resp, err
		}
		if resp != nil {
			drain(resp.Body)
		}
		if serr := sleep(req.Context(), wait); serr != nil {
			if err == nil {
				err = &StatusError{StatusCode: resp.StatusCode}
			}
			return nil, fmt.Errorf("httpbreaker: retry abandoned during backoff: %w; last attempt: %w", serr, err)
		}
		req = next
	}
}

// worthRetrying reports whether an attempt failed in a way another attempt may not: a
// failure the breaker counted, or 429; not a refusal by the breaker (its circuit or its
// concurrency limit), nor a cancellation.
func (t *Transport) worthRetrying(resp *http.Response, err error) bool {
	if errors.Is(err, breaker.ErrOpen) || errors.Is(err, breaker.ErrConcurrencyLimited) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	return t.outcome(resp, err) != nil || resp != nil && resp.StatusCode == http.StatusTooManyRequests
}

// rewound returns req ready to be sent again, with a fresh body.
func rewound(req *http.Request) (*http.Request, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return req, nil
	}
	body, err := req.GetBody()
	if err != nil {
		return nil, err
	}
	next := req.Clone(req.Context())
	next.Body = body
	return next, nil
}

// drain reads a little of a body that will not be used, so that its connection can be
// reused, and closes it.
func drain(body io.ReadCloser) {
	_, _ = io.CopyN(io.Discard, body, 4<<10)
	_ = body.Close()
}

func (r *Retry) backoff(n int) time.Duration {
	d := r.Base
	for i := 1; i < n && d < r.Max; i++ {
		d *= 2
	}
	return rand.N(min(d, r.Max) + 1)
}

// retryAfter reads resp's Retry-After, in seconds or as an HTTP date (RFC 9110 §10.2.3),
// as a wait from now; 0 when it is absent, malformed or in the past.
func retryAfter(resp *http.Response, now time.Time) time.Duration {
	v := strings.TrimSpace(resp.Header.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s <= 0 {
			return 0
		}
		return time.Duration(min(s, int64(24*time.Hour/time.Second))) * time.Second
	}
	if at, err := http.ParseTime(v); err == nil && at.After(now) {
		return at.Sub(now)
	}
	return 0
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
