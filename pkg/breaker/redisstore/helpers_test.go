package redisstore

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
)

func uitoa(u uint64) string { return strconv.FormatUint(u, 10) }

var errBoom = errors.New("boom")

func fail(context.Context) error    { return errBoom }
func succeed(context.Context) error { return nil }

// testPolicy opens after 5 calls of which half failed, and stays open for an hour unless a
// test says otherwise: no test waits for real time to pass unless it is about time.
func testPolicy() breaker.Policy {
	p := breaker.DefaultPolicy()
	p.Window = time.Minute
	p.MinimumThroughput = 5
	p.FailureRatio = 0.5
	p.OpenTimeout = time.Hour
	p.SuccessThreshold = 2
	return p
}

// clientTimeout bounds each of the tests' Redis round trips, the store's (WithOpTimeout)
// and the client's: Redis answers on loopback in well under a millisecond, but a loaded
// -race run has taken over 200 ms, and a store that times out marks an outage, which the
// tests that keep Redis up assert never happens.
const clientTimeout = 5 * time.Second

// newStore starts a store on its own client, as a separate process would have, and closes
// it when the test ends. Its keys are prefix + key: each test's own prefix is its
// application (TestApplicationInKeys covers the default).
func newStore(t testing.TB, srv *redisServer, prefix string, opts ...Option) *Store {
	t.Helper()
	opts = append([]Option{WithPrefix(prefix), WithApplication(""), WithPollInterval(100 * time.Millisecond),
		WithOpTimeout(clientTimeout), WithLogger(quietLogger(t))}, opts...)
	s, err := New(srv.Client(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func quietLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(testWriter{t}, nil))
	}
	return slog.New(slog.DiscardHandler)
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

func mustBreaker(t testing.TB, s *Store, name, key string, p breaker.Policy) *breaker.Breaker {
	t.Helper()
	b, err := breaker.New(name, p, breaker.WithObserver(s))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Attach(b, key); err != nil {
		t.Fatal(err)
	}
	return b
}

// patience bounds every wait for the stores' own goroutines and Redis: a verdict crosses
// in under a millisecond on a quiet machine (BenchmarkShareVerdict), and a wait returns as
// soon as its condition holds, so the bound is only how long a loaded -race run may take
// before the test says what never happened.
const patience = 30 * time.Second

// eventually polls cond every millisecond until it holds or d has passed, and returns how
// long it took. It is the root module's testutil.EventuallyEvery, kept as a copy here: this
// module cannot import the operator's internal/testutil without requiring the operator's
// module, Kubernetes and all, for its tests, and a module of its own for ten lines of test
// code would be one more to version and tag (docs/releasing.md).
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(time.Millisecond)
	}
	return time.Since(start)
}

// settle runs on the store's goroutine after it has handled everything queued so far,
// and reports whether the store is healthy.
func settle(t testing.TB, s *Store) bool {
	t.Helper()
	done := make(chan bool)
	select {
	case s.calls <- func() { s.flush(); done <- s.Healthy() }:
	case <-time.After(10 * time.Second):
		t.Fatal("store loop stuck")
	}
	return <-done
}

// ready waits until every breaker of the store has been reconciled with a reachable Redis.
func ready(t testing.TB, s *Store) {
	t.Helper()
	eventually(t, patience, "store reaches Redis", func() bool { return settle(t, s) })
}

// epoch returns the epoch the store last knew for the breaker named name.
func epoch(t testing.TB, s *Store, name string) uint64 {
	t.Helper()
	done := make(chan uint64)
	s.calls <- func() {
		s.mu.Lock()
		bd := s.byName[name]
		s.mu.Unlock()
		done <- bd.known
	}
	return <-done
}

func trip(t testing.TB, b *breaker.Breaker, failures int) {
	t.Helper()
	for range failures {
		_ = b.Execute(context.Background(), fail)
	}
	if b.State() != breaker.Open {
		t.Fatalf("%s did not open after %d failures: %v %+v", b.Name(), failures, b.State(), b.Counts())
	}
}

// stored reads the raw verdict hash.
func stored(t testing.TB, c *redis.Client, key string) map[string]string {
	t.Helper()
	m, err := c.HGetAll(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return m
}
