package breakertest

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// Upstream is a fake dependency that fails, answers HTTP status codes or slows down on
// command. Its [Upstream.Call] is what Breaker.Execute runs, and it is an http.Handler, to
// serve with httptest.NewServer behind httpbreaker's Transport or to wrap in its Handler.
// A new Upstream succeeds at once: Call returns nil, and HTTP requests get 200 OK.
//
// Each call takes the next answer queued by [Upstream.FailNext] or [Upstream.RespondNext],
// or else the standing one set by [Upstream.Succeed], [Upstream.Fail] or
// [Upstream.Respond]; setting a standing answer drops the queued ones. [Upstream.Slow]
// makes every call take longer, whatever it answers.
//
// Slowness is measured on the Upstream's clock. On a [Clock] (NewUpstream(clock)), a call
// advances the Clock by the delay and returns at once, so a breaker on that Clock sees a
// call that took exactly that long (concurrent calls each advance it: time passes for all
// of them). On real time (NewUpstream(nil)) a call sleeps, and returns ctx.Err() if its
// context is done first. Either way, a call whose context is already done returns its
// error at once, as a client library would. An Upstream is safe for concurrent use.
type Upstream struct {
	clock *Clock // nil: real time

	mu       sync.Mutex
	standing answer        // guarded by mu
	queued   []answer      // guarded by mu
	delay    time.Duration // guarded by mu
	calls    int           // guarded by mu
	failures int           // guarded by mu
	inFlight int           // guarded by mu
}

// answer is what one call gets: err for Call, status (and err's text as the body, if any)
// over HTTP.
type answer struct {
	err    error
	status int
}

var succeed = answer{status: http.StatusOK}

func (a answer) failed() bool { return a.err != nil || a.status >= 500 }

// StatusError is what [Upstream.Call] returns for a 5xx status set by [Upstream.Respond] or
// [Upstream.RespondNext]: over HTTP the status itself is the failure.
type StatusError struct{ Code int }

func (e *StatusError) Error() string {
	return fmt.Sprintf("breakertest: upstream answered %d %s", e.Code, http.StatusText(e.Code))
}

// NewUpstream returns an Upstream that succeeds at once, slow on clock, or on real time if
// clock is nil.
func NewUpstream(clock *Clock) *Upstream {
	return &Upstream{clock: clock, standing: succeed}
}

// Succeed makes every later call succeed: Call returns nil, HTTP answers 200 OK. Queued
// answers are dropped.
func (u *Upstream) Succeed() { u.stand(succeed) }

// Fail makes every later call fail: Call returns err (nil: [ErrInjected]), HTTP answers 503
// Service Unavailable with err's text as the body. Queued answers are dropped.
func (u *Upstream) Fail(err error) { u.stand(failWith(err)) }

// Respond makes every later call answer status: HTTP with that status and its text as the
// body, Call with nil for a status below 500 and a [*StatusError] from 500 up (the division
// of blame httpbreaker makes). Queued answers are dropped.
func (u *Upstream) Respond(status int) { u.stand(respondWith(status)) }

// FailNext makes the next n calls fail as [Upstream.Fail] does, after any answers queued
// before them; then the standing answer resumes.
func (u *Upstream) FailNext(n int, err error) { u.queue(n, failWith(err)) }

// RespondNext makes the next n calls answer status as [Upstream.Respond] does, after any
// answers queued before them; then the standing answer resumes.
//
// Respond and RespondNext panic on a status net/http cannot send (below 100 or above 999).
func (u *Upstream) RespondNext(n int, status int) { u.queue(n, respondWith(status)) }

// Slow makes every later call take d before it answers (0: none).
func (u *Upstream) Slow(d time.Duration) {
	u.mu.Lock()
	u.delay = max(d, 0)
	u.mu.Unlock()
}

// Calls returns how many calls reached the Upstream, over Call and HTTP, including those
// in flight. Calls a breaker short-circuited never reach it: that is what a test counts.
func (u *Upstream) Calls() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.calls
}

// Failures returns how many calls the Upstream answered with a failure: an error from
// Fail or FailNext, or a 5xx status. Calls whose context ended first are not among them.
func (u *Upstream) Failures() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.failures
}

// InFlight returns how many calls have reached the Upstream and not yet answered: on real
// time, the slow ones still sleeping.
func (u *Upstream) InFlight() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.inFlight
}

// Call is one call to the Upstream, in the shape Breaker.Execute runs:
// b.Execute(ctx, upstream.Call).
func (u *Upstream) Call(ctx context.Context) error {
	a, err := u.serve(ctx)
	if err != nil {
		return err
	}
	if a.err == nil && a.status >= 500 {
		return &StatusError{Code: a.status}
	}
	return a.err
}

// ServeHTTP answers an HTTP request as the Upstream is told to. A request whose context
// ends while the Upstream is slow gets no answer, as from a server that gave up.
func (u *Upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a, err := u.serve(r.Context())
	if err != nil {
		return
	}
	body := http.StatusText(a.status)
	if a.err != nil {
		body = a.err.Error()
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(a.status)
	_, _ = fmt.Fprintln(w, body)
}

var _ http.Handler = (*Upstream)(nil)

// serve takes the call's answer and its delay, and waits it out; err is ctx's error when
// the caller gave up first.
func (u *Upstream) serve(ctx context.Context) (answer, error) {
	u.mu.Lock()
	u.calls++
	a := u.standing
	if len(u.queued) > 0 {
		a = u.queued[0]
		u.queued = u.queued[1:]
	}
	delay := u.delay
	u.inFlight++
	u.mu.Unlock()

	err := ctx.Err()
	if err == nil && delay > 0 {
		err = u.wait(ctx, delay)
	}
	u.mu.Lock()
	u.inFlight--
	if err == nil && a.failed() {
		u.failures++
	}
	u.mu.Unlock()
	return a, err
}

func (u *Upstream) wait(ctx context.Context, d time.Duration) error {
	if u.clock != nil {
		u.clock.Advance(d)
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (u *Upstream) stand(a answer) {
	u.mu.Lock()
	u.standing, u.queued = a, nil
	u.mu.Unlock()
}

func (u *Upstream) queue(n int, a answer) {
	u.mu.Lock()
	for range n {
		u.queued = append(u.queued, a)
	}
	u.mu.Unlock()
}

func failWith(err error) answer {
	if err == nil {
		err = ErrInjected
	}
	return answer{err: err, status: http.StatusServiceUnavailable}
}

func respondWith(status int) answer {
	if status < 100 || status > 999 {
		// net/http would panic later, in the server's goroutine, far from the mistake.
		panic(fmt.Sprintf("breakertest: %d is not an HTTP status code (100 to 999)", status))
	}
	return answer{status: status}
}
