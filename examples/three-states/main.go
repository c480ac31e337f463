// Three-states shows breaker.Call's three callbacks, one per state of the circuit:
// Closed makes the normal call, HalfOpen makes the recovery probe with a shorter timeout,
// and Open is the fallback, which answers from a cache without calling the service.
//
// It starts a local service, makes it hang, brings it back sluggish and then brisk, and
// prints what each call got and every change of the circuit's state:
//
//	go run ./examples/three-states
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	"github.com/fusebox-dev/fusebox/examples/internal/narrate"
	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/observe"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "three-states:", err)
		os.Exit(1)
	}
}

// The timeouts of a call. A probe asks one question, "is the service back?", and a
// service that needs longer than probeTimeout to answer is not back yet: the circuit
// stays open rather than send it the full load it just failed under. The sluggish
// service answers halfway between the two, and the brisk one far inside both, so that
// the story is the same on a machine too busy to run anything on time.
const (
	callTimeout  = time.Second
	probeTimeout = 500 * time.Millisecond
	sluggish     = 750 * time.Millisecond
)

func run(ctx context.Context, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()

	svc := newService()
	defer svc.Close()

	// Short periods, so that the whole story takes a few seconds: the circuit opens once
	// half of at least 4 calls have failed, stays open for a second, then closes after 2
	// successful probes.
	policy := breaker.DefaultPolicy()
	policy.OpenTimeout = time.Second
	policy.MinimumThroughput = 4
	policy.SuccessThreshold = 2
	// entered counts the transitions into each state, so that the story can wait for one.
	var entered [3]int
	story := narrate.New(out)
	watch := story.Observer(narrate.Circuit{
		Failed: "%d of the last %d calls failed",
		Seen:   func(t observe.Transition) { entered[t.To]++ },
	})
	b, err := breaker.New("quotes", policy, breaker.WithObserver(watch))
	if err != nil {
		return err
	}

	cache := "" // the last answer the service gave
	call := func() error {
		quote, err := breaker.Call(ctx, b, breaker.Callbacks[string]{
			Closed: func(ctx context.Context) (string, error) {
				q, err := svc.fetch(ctx, callTimeout)
				if err == nil {
					fmt.Fprintf(out, "  answered %q\n", q)
					cache = q
				}
				return q, err
			},
			HalfOpen: func(ctx context.Context) (string, error) {
				fmt.Fprintf(out, "  probe, with a %v timeout:", probeTimeout)
				q, err := svc.fetch(ctx, probeTimeout)
				if err != nil {
					fmt.Fprintln(out, " no")
					return "", err
				}
				fmt.Fprintf(out, " answered %q\n", q)
				cache = q
				return q, nil
			},
			Open: func(_ context.Context, cause error) (string, error) {
				if errors.Is(cause, breaker.ErrOpen) {
					fmt.Fprintf(out, "  not called (circuit open): from the cache: %q\n", cache)
				} else {
					fmt.Fprintf(out, "  failed (%v): from the cache: %q\n", cause, cache)
				}
				return cache, nil
			},
		})
		story.CallOver()
		if err != nil {
			return err // an error the fallback did not handle: ctx is done
		}
		if quote != cache {
			return fmt.Errorf("got %q, neither the service's answer nor the cache", quote)
		}
		return ctx.Err()
	}
	// callsUntil calls every 250ms until the circuit has entered state want.
	callsUntil := func(want breaker.State) error {
		for seen := entered[want]; entered[want] == seen; {
			select {
			case <-ctx.Done():
				return fmt.Errorf("circuit still %v, waiting for %v: %w", b.State(), want, ctx.Err())
			case <-time.After(250 * time.Millisecond):
			}
			if err := call(); err != nil {
				return err
			}
		}
		return nil
	}

	fmt.Fprintln(out, "The service answers at once.")
	svc.set(time.Millisecond)
	for range 4 {
		if err := call(); err != nil {
			return err
		}
	}

	fmt.Fprintf(out, "The service hangs: every call times out after %v.\n", callTimeout)
	svc.set(time.Hour)
	if err := callsUntil(breaker.Open); err != nil {
		return err
	}
	for range 2 {
		if err := call(); err != nil {
			return err
		}
	}

	fmt.Fprintf(out, "The service is back, but answers in %v: slower than a probe may take.\n", sluggish)
	svc.set(sluggish)
	if err := callsUntil(breaker.Open); err != nil {
		return err
	}

	fmt.Fprintln(out, "The service answers at once again.")
	svc.set(time.Millisecond)
	if err := callsUntil(breaker.Closed); err != nil {
		return err
	}
	if err := call(); err != nil {
		return err
	}
	fmt.Fprintf(out, "Done: the service saw %d calls.\n", svc.calls())
	return nil
}

// service is the local HTTP service the example calls: it answers after a delay the
// example changes.
type service struct {
	*httptest.Server
	mu    sync.Mutex
	delay time.Duration
	n     int
}

func newService() *service {
	s := &service{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.n++
		delay, n := s.delay, s.n
		s.mu.Unlock()
		select {
		case <-time.After(delay):
			fmt.Fprintf(w, "quote #%d", n)
		case <-r.Context().Done(): // the caller gave up
		}
	}))
	return s
}

func (s *service) set(delay time.Duration) {
	s.mu.Lock()
	s.delay = delay
	s.mu.Unlock()
}

func (s *service) calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// fetch gets a quote, giving up after timeout.
func (s *service) fetch(ctx context.Context, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL, nil)
	if err != nil {
		return "", err
	}
	resp, err := s.Client().Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return "", fmt.Errorf("no answer within %v", timeout)
		}
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("service answered %s", resp.Status)
	}
	return strings.TrimSpace(string(body)), nil
}
