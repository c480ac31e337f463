package httpbreaker

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/registry"
)

// Handler is server-side middleware that runs Next through a breaker. While the circuit is
// open it answers 503 Service Unavailable with a Retry-After header giving the whole seconds
// until the circuit admits probes (1 while half-open probes are at their cap; none under
// ForcedOpen, whose end nobody knows), so well-behaved clients and load balancers back off
// instead of piling onto a struggling service. A Handler is safe for concurrent use.
//
// With Group set, each request goes through the Group's breaker of its key instead, so that
// one failing route (or tenant) sheds its own load and not the whole server's (see
// [NewGroupHandler]).
type Handler struct {
	// Breaker guards every request. Required unless Group is set.
	Breaker *breaker.Breaker
	// Group, when set, replaces Breaker: a request goes through Group's breaker of Key(r).
	Group *registry.Group
	// Key picks a request's key in Group; nil means ByPattern.
	Key func(*http.Request) string
	// Next serves the requests the breaker admits. Required.
	Next http.Handler
	// IsFailure decides which response statuses count against the service; nil means
	// status >= 500.
	IsFailure func(status int) bool
	// Refused answers a refused request; nil means the 503 described above. err matches
	// breaker.ErrOpen (and breaker.ErrThrottled when adaptive throttling refused it), or
	// breaker.ErrConcurrencyLimited when the concurrency limit did, and its text says why.
	Refused func(w http.ResponseWriter, r *http.Request, err error)
}

var _ http.Handler = (*Handler)(nil)

// NewHandler returns a Handler that guards next with b.
func NewHandler(b *breaker.Breaker, next http.Handler) *Handler {
	return &Handler{Breaker: b, Next: next}
}

// Middleware returns a function wrapping handlers with b, for routers that take
// func(http.Handler) http.Handler.
func Middleware(b *breaker.Breaker) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler { return NewHandler(b, next) }
}

// NewGroupHandler returns a Handler that guards next with one breaker of g per key(r); key
// nil means ByPattern, one breaker per ServeMux pattern.
func NewGroupHandler(g *registry.Group, key func(*http.Request) string, next http.Handler) *Handler {
	return &Handler{Group: g, Key: key, Next: next}
}

// GroupMiddleware returns a function wrapping handlers with g's breaker of key(r), for
// routers that take func(http.Handler) http.Handler.
func GroupMiddleware(g *registry.Group, key func(*http.Request) string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler { return NewGroupHandler(g, key, next) }
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b := guard(h.Breaker, h.Group, h.Key, ByPattern, r)
	done, err := b.Allow()
	if err != nil {
		if h.Refused != nil {
			h.Refused(w, r, err)
			return
		}
		refuse(w, b, err)
		return
	}
	sw := &statusWriter{ResponseWriter: w}
	completed := false
	defer func() {
		if completed {
			return
		}
		switch v := recover(); v {
		case nil: // runtime.Goexit: the handler neither succeeded nor failed
			done(context.Canceled)
		case http.ErrAbortHandler:
			// The deliberate way to abort a response (net/http's own reverse proxy uses it
			// when a copy breaks); it says nothing about this service's health.
			done(context.Canceled)
			panic(v)
		default:
			done(errPanicked)
			panic(v)
		}
	}()
	h.Next.ServeHTTP(sw, r)
	completed = true
	done(h.outcome(sw, r))
}

func (h *Handler) outcome(sw *statusWriter, r *http.Request) error {
	status := sw.status
	if status == 0 {
		if errors.Is(r.Context().Err(), context.Canceled) {
			// The client went away before anything was written.
			return context.Canceled
		}
		status = http.StatusOK // what net/http sends for a handler that wrote nothing
	}
	isFailure := h.IsFailure
	if isFailure == nil {
		isFailure = func(s int) bool { return s >= 500 }
	}
	if isFailure(status) {
		return &StatusError{StatusCode: status}
	}
	return nil
}

func refuse(w http.ResponseWriter, b *breaker.Breaker, err error) {
	if errors.Is(err, breaker.ErrConcurrencyLimited) {
		// Not the circuit: a slot comes free as soon as a call in flight ends.
		w.Header().Set("Retry-After", "1")
		http.Error(w, http.StatusText(http.StatusServiceUnavailable)+": concurrency limit reached", http.StatusServiceUnavailable)
		return
	}
	if d, ok := b.RetryAfter(); ok {
		w.Header().Set("Retry-After", strconv.FormatInt(retryAfterSeconds(d), 10))
	} else if !errors.Is(err, breaker.ErrThrottled) && b.State() == breaker.HalfOpen {
		// Refused for the probe cap: a probe is in flight, and its answer comes soon.
		w.Header().Set("Retry-After", "1")
	}
	http.Error(w, http.StatusText(http.StatusServiceUnavailable)+": circuit open", http.StatusServiceUnavailable)
}

// retryAfterSeconds rounds up, and never says 0: "retry now" would bring the caller back
// before the circuit admits anyone.
func retryAfterSeconds(d time.Duration) int64 {
	s := int64((d + time.Second - 1) / time.Second)
	return max(s, 1)
}

// statusWriter remembers the status the handler sent. It passes Flush and Hijack through
// (and Unwrap for http.ResponseController), so that streaming and upgrades keep working
// behind the breaker.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	// 1xx answers other than 101 are interim; the final status comes later.
	if w.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil && w.status == 0 {
		w.status = http.StatusSwitchingProtocols
	}
	return conn, rw, err
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

var (
	_ http.Flusher  = (*statusWriter)(nil)
	_ http.Hijacker = (*statusWriter)(nil)
)
