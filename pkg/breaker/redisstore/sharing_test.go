package redisstore

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakertest"
)

// TestAttachedDuringOutage: a breaker attached while Redis is down adopts the verdict it
// finds when Redis returns.
func TestAttachedDuringOutage(t *testing.T) {
	srv := startRedis(t)
	prefix := freeKey(t)
	s := newStore(t, srv, prefix)
	ready(t, s)
	srv.Kill()
	b := mustBreaker(t, s, "b", "k", testPolicy())
	srv.Start()
	since := time.Now().Add(-time.Second).Truncate(time.Millisecond)
	srv.Client().HSet(context.Background(), prefix+"k", "format", format, "epoch", "3", "state", "open",
		"since", encodeSince(since), "hos", "0")
	eventually(t, patience, "b adopts the verdict", func() bool { return b.State() == breaker.Open })
	if !s.Healthy() {
		t.Error("not healthy after adopting")
	}
}

// TestTripOverOlderClosedVerdict: a trip whose compare-and-set loses to an older closed
// verdict (one the process had not seen) is written on top of it, not dropped.
func TestTripOverOlderClosedVerdict(t *testing.T) {
	srv := startRedis(t)
	prefix := freeKey(t)
	s := newStore(t, srv, prefix, WithPollInterval(time.Hour)) // the store reads nothing by itself
	b := mustBreaker(t, s, "b", "k", testPolicy())
	ready(t, s)
	srv.Client().HSet(context.Background(), prefix+"k", "format", format, "epoch", "2", "state", "closed",
		"since", encodeSince(time.Now().Add(-time.Minute)), "hos", "0")
	trip(t, b, 5)
	settle(t, s)
	if got := stored(t, srv.Client(), prefix+"k"); got["epoch"] != "3" || got["state"] != "open" {
		t.Errorf("stored %v, want the trip on top (epoch 3, open)", got)
	}
	if st := s.Stats(); st.Conflicts != 1 || st.Published != 1 {
		t.Errorf("stats %+v, want one conflict then one write", st)
	}
	if b.State() != breaker.Open {
		t.Error("the trip was undone")
	}
}

// TestNoChurnOnStart: a process that starts and finds the circuit closed writes nothing.
func TestNoChurnOnStart(t *testing.T) {
	srv := startRedis(t)
	prefix := freeKey(t)
	srv.Client().HSet(context.Background(), prefix+"k", "format", format, "epoch", "4", "state", "closed",
		"since", encodeSince(time.Now().Add(-time.Hour)), "hos", "0")
	s := newStore(t, srv, prefix)
	mustBreaker(t, s, "b", "k", testPolicy())
	ready(t, s)
	time.Sleep(250 * time.Millisecond) // two polls
	settle(t, s)
	if got := stored(t, srv.Client(), prefix+"k"); got["epoch"] != "4" {
		t.Errorf("stored %v, want epoch 4 untouched", got)
	}
	if e := epoch(t, s, "b"); e != 4 {
		t.Errorf("known epoch %d, want 4", e)
	}
}

func TestKeyPrefixAndTTL(t *testing.T) {
	srv := startRedis(t)
	prefix := freeKey(t) + "custom:"
	s := newStore(t, srv, prefix, WithTTL(time.Minute))
	b := mustBreaker(t, s, "b", "orders", testPolicy())
	ready(t, s)
	trip(t, b, 5)
	settle(t, s)
	c := srv.Client()
	ttl := c.PTTL(context.Background(), prefix+"orders").Val()
	if ttl <= 0 || ttl > time.Minute {
		t.Errorf("TTL of %sorders: %v, want (0, 1m]", prefix, ttl)
	}
	if got := stored(t, c, prefix+"orders"); got["state"] != "open" || got["by"] == "" {
		t.Errorf("stored %v", got)
	}
}

// TestApplicationInKeys: two applications on one Redis that both name a breaker "db" do not
// share a verdict (issue 11); by default the application is the program's name.
func TestApplicationInKeys(t *testing.T) {
	srv := startRedis(t)
	prefix := freeKey(t)
	billing := newStore(t, srv, prefix, WithApplication("billing"))
	shipping := newStore(t, srv, prefix, WithApplication("shipping"))
	a := mustBreaker(t, billing, "db", "db", testPolicy())
	b := mustBreaker(t, shipping, "db", "db", testPolicy())
	ready(t, billing)
	ready(t, shipping)
	trip(t, a, 5)
	settle(t, billing)
	c := srv.Client()
	if got := stored(t, c, prefix+"billing:db"); got["state"] != "open" {
		t.Fatalf("billing's verdict: %v", got)
	}
	// shipping polls every 100 ms: give it a few polls to (wrongly) pick the verdict up.
	time.Sleep(300 * time.Millisecond)
	settle(t, shipping)
	if s := b.State(); s != breaker.Closed {
		t.Fatalf("shipping's db is %v: it took billing's verdict", s)
	}
	if n := c.Exists(context.Background(), prefix+"shipping:db").Val(); n != 0 {
		t.Fatal("shipping wrote a verdict it never reached")
	}
	if billing.cfg.channel == shipping.cfg.channel {
		t.Errorf("both announce on %q", billing.cfg.channel)
	}

	t.Run("default", func(t *testing.T) {
		exe, err := os.Executable()
		if err != nil {
			t.Skip("no executable path on this platform:", err)
		}
		t.Setenv("POD_NAMESPACE", "")
		s, err := New(c, WithPrefix("p:"), WithLogger(quietLogger(t)))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if got, want := s.Key("db"), "p:"+filepath.Base(exe)+":db"; got != want {
			t.Errorf("key %q, want %q", got, want)
		}
		t.Setenv("POD_NAMESPACE", "shop")
		s2, err := New(c, WithLogger(quietLogger(t)))
		if err != nil {
			t.Fatal(err)
		}
		defer s2.Close()
		if got, want := s2.Key("db"), DefaultPrefix+"shop/"+filepath.Base(exe)+":db"; got != want {
			t.Errorf("key in a pod %q, want %q", got, want)
		}
		if got, want := s2.cfg.channel, DefaultPrefix+"shop/"+filepath.Base(exe); got != want {
			t.Errorf("channel %q, want %q", got, want)
		}
	})
}

// TestBackoffShared: a process that adopts a backed-off open verdict keeps its open period
// (docs/design.md §5.13), even where its own count would have said otherwise, up to the longest
// its own policy allows; and a period an older writer left behind for another epoch is not
// taken for the current one.
func TestBackoffShared(t *testing.T) {
	srv := startRedis(t)
	prefix := freeKey(t)
	p := testPolicy()
	p.MaxOpenTimeout = 8 * p.OpenTimeout
	one := newStore(t, srv, prefix)
	other := newStore(t, srv, prefix)
	// a's clock starts three hours back, so that its third open period starts about now.
	clock := breakertest.NewClock(time.Now().Add(-3 * p.OpenTimeout))
	a := mustBreakerOn(t, one, "a", "payments", p, clock)
	local := p
	// c has never opened, so by its own count its next open period would be the first;
	// and it would back off only to 4 × openTimeout, which bounds what it adopts.
	local.MaxOpenTimeout = 4 * p.OpenTimeout
	c := mustBreaker(t, other, "c", "payments", local)
	ready(t, one)
	ready(t, other)

	a.Trip()
	clock.Advance(p.OpenTimeout)
	a.Trip() // half-open by then: the second consecutive open period
	clock.Advance(2 * p.OpenTimeout)
	a.Trip() // the third consecutive open period: 4 × openTimeout
	want := a.Verdict()
	if want.ConsecutiveOpens != 3 || want.OpenTimeout != 4*p.OpenTimeout {
		t.Fatalf("local verdict %+v, want the third period, 4 × %v", want, p.OpenTimeout)
	}
	eventually(t, shareWithin, "c adopts the third period", func() bool {
		v := c.Verdict()
		return v.State == breaker.Open && v.ConsecutiveOpens == 3 && v.OpenTimeout == want.OpenTimeout
	})
	if d, ok := c.RetryAfter(); !ok || d <= p.OpenTimeout {
		t.Errorf("c RetryAfter = %v, %v: want the shared backed-off period, not its own %v", d, ok, p.OpenTimeout)
	}
	keys, err := srv.Client().Keys(context.Background(), prefix+"*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("keys under %s: %v, %v", prefix, keys, err)
	}
	h := stored(t, srv.Client(), keys[0])
	if wantPeriod := h["epoch"] + " 3 " + strconv.FormatInt(int64(want.OpenTimeout), 10); h["period"] != wantPeriod {
		t.Errorf("stored period %q, want %q", h["period"], wantPeriod)
	}
}
