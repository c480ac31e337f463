package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakertest"
)

// TestEarnedCloseBeatsTimedOutHalfOpen: two processes share an open verdict. When its
// period ends, one goes half-open by the clock alone and publishes that first; the other
// closes on a probe at the same instant, from the same view of the shared verdict, and
// loses the compare-and-set. At equal timestamps the earned close must win: it is written
// on top, and the first process adopts it. Before, the loser adopted the half-open verdict
// and the close was lost everywhere.
func TestEarnedCloseBeatsTimedOutHalfOpen(t *testing.T) {
	srv := startRedis(t)
	prefix := freeKey(t)
	p := testPolicy()
	p.OpenTimeout = time.Minute
	p.SuccessThreshold = 1
	clock := breakertest.NewClock(time.Now())

	// Two processes: a store of its own (own client, own loop) and a breaker each, on one
	// clock so that both reach the end of the open period at the same instant.
	sa := newStore(t, srv, prefix, WithPollInterval(time.Hour))
	sb := newStore(t, srv, prefix, WithPollInterval(time.Hour))
	a := mustBreakerOn(t, sa, "a", "k", p, clock)
	b := mustBreakerOn(t, sb, "b", "k", p, clock)
	ready(t, sa)
	ready(t, sb)

	a.Trip()
	eventually(t, patience, "b adopts a's open verdict", func() bool { return b.State() == breaker.Open })
	settle(t, sa)
	settle(t, sb)
	openEpoch := epoch(t, sb, "b")
	clock.Advance(p.OpenTimeout)

	// b's store is held busy, as a process whose loop is behind is: it cannot hear a's
	// half-open before its own close is published.
	release := hold(t, sb)
	if s := a.State(); s != breaker.HalfOpen {
		t.Fatalf("a: %v, want half-open by its timeout", s)
	}
	eventually(t, patience, "a publishes its half-open", func() bool {
		return stored(t, srv.Client(), prefix+"k")["state"] == "half_open"
	})
	if err := b.Execute(context.Background(), succeed); err != nil {
		t.Fatal(err)
	}
	if s := b.State(); s != breaker.Closed {
		t.Fatalf("b: %v, want closed by its probe", s)
	}
	va, vb := a.Verdict(), b.Verdict()
	if !va.Since.Equal(vb.Since) {
		t.Fatalf("no tie: a half-open since %v, b closed since %v", va.Since, vb.Since)
	}
	release()

	settle(t, sb)
	if got := stored(t, srv.Client(), prefix+"k"); got["state"] != "closed" {
		t.Errorf("stored %v, want b's earned close on top", got)
	}
	if s := b.State(); s != breaker.Closed {
		t.Errorf("b: %v, want closed: the timed-out half-open undid its close", s)
	}
	if st := sb.Stats(); st.Conflicts < 1 {
		t.Errorf("b's store saw no conflict (%+v): the test did not make the race it is about", st)
	}
	if e := epoch(t, sb, "b"); e != openEpoch+2 {
		t.Errorf("b knows epoch %d, want %d (a's half-open, then b's close on top)", e, openEpoch+2)
	}
	eventually(t, patience, "a adopts the close", func() bool { return a.State() == breaker.Closed })
}

// mustBreakerOn is mustBreaker with the breaker reading clock.
func mustBreakerOn(t testing.TB, s *Store, name, key string, p breaker.Policy, clock breaker.Clock) *breaker.Breaker {
	t.Helper()
	b, err := breaker.New(name, p, breaker.WithObserver(s), breaker.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Attach(b, key); err != nil {
		t.Fatal(err)
	}
	return b
}

// hold blocks the store's goroutine until the returned function is called.
func hold(t testing.TB, s *Store) (release func()) {
	t.Helper()
	held, done := make(chan struct{}), make(chan struct{})
	select {
	case s.calls <- func() { close(held); <-done }:
	case <-time.After(10 * time.Second):
		t.Fatal("store loop stuck")
	}
	<-held
	return func() { close(done) }
}
