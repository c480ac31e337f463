package redisstore

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakertest"
)

// shareWithin is the bound for a verdict to reach the other breakers.
const shareWithin = 100 * time.Millisecond

func TestShareVerdictNotWindow(t *testing.T) {
	srv := startRedis(t)
	prefix := freeKey(t)
	p := testPolicy()
	one := newStore(t, srv, prefix)
	other := newStore(t, srv, prefix) // a second process, as far as Redis can tell
	a := mustBreaker(t, one, "a", "payments", p)
	b := mustBreaker(t, one, "b", "payments", p) // a second breaker of the same process and key
	c := mustBreaker(t, other, "c", "payments", p)
	unrelated := mustBreaker(t, other, "d", "ledger", p)
	ready(t, one)
	ready(t, other)

	// Three failures in each breaker: nine in all, but no window holds five calls, so
	// nothing opens. A shared window would have.
	for _, br := range []*breaker.Breaker{a, b, c} {
		for range 3 {
			_ = br.Execute(context.Background(), fail)
		}
	}
	settle(t, one)
	settle(t, other)
	for _, br := range []*breaker.Breaker{a, b, c} {
		if br.State() != breaker.Closed || br.Counts().Calls != 3 {
			t.Fatalf("%s: %v %+v, want closed with its own 3 calls", br.Name(), br.State(), br.Counts())
		}
	}

	trip(t, a, 2)
	since := a.Verdict().Since
	for _, br := range []*breaker.Breaker{b, c} {
		took := eventually(t, shareWithin, br.Name()+" opens", func() bool { return br.State() == breaker.Open })
		t.Logf("%s open after %v", br.Name(), took)
		if v := br.Verdict(); !v.Since.Equal(since) {
			t.Errorf("%s open since %v, want the shared %v", br.Name(), v.Since, since)
		}
		// Its own window is untouched: it still holds its own three calls.
		if got := br.Counts(); got.Calls != 3 || got.Failures != 3 {
			t.Errorf("%s counts %+v, want its own 3 failures", br.Name(), got)
		}
	}
	if unrelated.State() != breaker.Closed {
		t.Error("a breaker under another key opened")
	}
	if got := stored(t, srv.Client(), prefix+"payments"); got["state"] != "open" || got["epoch"] != "1" {
		t.Errorf("stored %v", got)
	}
}

// TestOneOpenPeriod: fifty processes (stores on their own connections) trip the same
// circuit at once; there is one open period, everywhere.
func TestOneOpenPeriod(t *testing.T) {
	srv := startRedis(t)
	prefix := freeKey(t)
	p := testPolicy()
	p.MinimumThroughput = 1
	const n = 50
	stores := make([]*Store, n)
	breakers := make([]*breaker.Breaker, n)
	for i := range n {
		stores[i] = newStore(t, srv, prefix)
		breakers[i] = mustBreaker(t, stores[i], "b", "shared", p)
	}
	for _, s := range stores {
		ready(t, s)
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for _, b := range breakers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_ = b.Execute(context.Background(), fail)
		}()
	}
	close(start)
	wg.Wait()

	first := stored(t, srv.Client(), prefix+"shared")
	if first["epoch"] != "1" || first["state"] != "open" {
		t.Fatalf("stored %v, want one open period (epoch 1)", first)
	}
	shared, _ := parseShared(first["epoch"], first["state"], first["since"], first["hos"])
	eventually(t, time.Second, "every breaker adopts the winner's open period", func() bool {
		for _, b := range breakers {
			if v := b.Verdict(); v.State != breaker.Open || !v.Since.Equal(shared.since) {
				return false
			}
		}
		return true
	})
	var published uint64
	for _, s := range stores {
		settle(t, s)
		published += s.Stats().Published
	}
	if published != 1 {
		t.Errorf("%d verdicts published, want 1", published)
	}
	if got := stored(t, srv.Client(), prefix+"shared"); got["epoch"] != "1" {
		t.Errorf("stored %v after the race, want still epoch 1", got)
	}
}

// TestRedisKilledMidTraffic: no call waits on Redis, breakers keep deciding alone while it
// is down, and re-join the shared verdict when it returns.
func TestRedisKilledMidTraffic(t *testing.T) {
	srv := startRedis(t)
	prefix := freeKey(t)
	p := testPolicy()
	one := newStore(t, srv, prefix)
	other := newStore(t, srv, prefix)
	a := mustBreaker(t, one, "a", "k", p)
	b := mustBreaker(t, other, "b", "k", p)
	ready(t, one)
	ready(t, other)

	// Traffic on both breakers throughout, each call's latency recorded.
	var slowest atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, br := range []*breaker.Breaker{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				_ = br.Execute(context.Background(), succeed)
				if d := int64(time.Since(start)); d > slowest.Load() {
					slowest.Store(d)
				}
				time.Sleep(50 * time.Microsecond)
			}
		}()
	}

	time.Sleep(50 * time.Millisecond)
	srv.Kill()
	eventually(t, 5*time.Second, "stores notice the outage", func() bool { return !one.Healthy() && !other.Healthy() })

	// Alone, a still decides: it opens, and b, which cannot hear of it, stays closed.
	a.Trip()
	time.Sleep(300 * time.Millisecond) // three polls fail meanwhile
	if b.State() != breaker.Closed {
		t.Fatal("b opened while Redis was down")
	}
	st := one.Stats()
	if st.Healthy || st.Errors == 0 || st.Outages != 1 || st.LastError == nil {
		t.Errorf("stats during the outage: %+v", st)
	}

	srv.Start()
	took := eventually(t, 5*time.Second, "b adopts a's verdict after Redis returns", func() bool {
		return b.State() == breaker.Open
	})
	t.Logf("re-joined %v after restart", took)
	if !b.Verdict().Since.Equal(a.Verdict().Since) {
		t.Error("b's open period is not a's")
	}
	if !one.Healthy() || !other.Healthy() {
		t.Error("stores not healthy again")
	}
	close(stop)
	wg.Wait()
	// The call path never touches Redis: its latency is independent of the outage. The
	// bound is loose for shared CI machines under -race; a call that waited on a Redis
	// timeout (300ms here) would exceed it.
	if d := time.Duration(slowest.Load()); d > 100*time.Millisecond {
		t.Errorf("slowest call took %v", d)
	}
	t.Logf("slowest call %v", time.Duration(slowest.Load()))
}

func TestUnreachableAtStart(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	client := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 100 * time.Millisecond, MaxRetries: -1})
	defer client.Close()
	s, err := New(client, WithPollInterval(50*time.Millisecond), WithLogger(quietLogger(t)))
	if err != nil {
		t.Fatalf("New with Redis down: %v", err)
	}
	defer s.Close()
	b, err := s.NewBreaker("b", testPolicy())
	if err != nil {
		t.Fatalf("NewBreaker with Redis down: %v", err)
	}
	trip(t, b, 5)
	eventually(t, 2*time.Second, "the failure is counted", func() bool { return s.Stats().Errors > 0 })
	if s.Healthy() {
		t.Error("healthy without Redis")
	}
}

func TestJoinAfterStart(t *testing.T) {
	srv := startRedis(t)
	srv.Kill()
	prefix := freeKey(t)
	s := newStore(t, srv, prefix)
	b := mustBreaker(t, s, "b", "k", testPolicy())
	trip(t, b, 5) // opened alone while Redis is down
	srv.Start()
	eventually(t, 5*time.Second, "the verdict reaches Redis", func() bool {
		return stored(t, srv.Client(), prefix+"k")["state"] == "open"
	})
}

func TestGarbageIgnored(t *testing.T) {
	srv := startRedis(t)
	prefix := freeKey(t)
	c := srv.Client()
	ctx := context.Background()
	c.Set(ctx, prefix+"str", "not a verdict", 0)
	c.HSet(ctx, prefix+"hash", "state", "open", "since", "1") // someone else's hash
	c.HSet(ctx, prefix+"bad", "format", format, "epoch", "1", "state", "ajar", "since", "1", "hos", "0")
	s := newStore(t, srv, prefix)
	other := newStore(t, srv, prefix)
	for _, key := range []string{"str", "hash", "bad"} {
		b := mustBreaker(t, s, key, key, testPolicy())
		ob := mustBreaker(t, other, key, key, testPolicy())
		ready(t, s)
		if b.State() != breaker.Closed {
			t.Errorf("%s: adopted garbage: %v", key, b.State())
		}
		trip(t, b, 5) // decides alone
		settle(t, s)
		time.Sleep(150 * time.Millisecond) // a poll or more
		if ob.State() != breaker.Closed {
			t.Errorf("%s: a verdict was shared through garbage", key)
		}
	}
	if got := c.Get(ctx, prefix+"str").Val(); got != "not a verdict" {
		t.Errorf("garbage overwritten: %q", got)
	}
	if got := c.HGet(ctx, prefix+"hash", "state").Val(); got != "open" || c.HExists(ctx, prefix+"hash", "format").Val() {
		t.Error("foreign hash overwritten")
	}

	// Garbage on the channel is ignored and counted.
	before := other.Stats().Garbage
	c.Publish(ctx, other.cfg.channel, "hello")
	c.Publish(ctx, other.cfg.channel, format+" 1 closed -1 0 "+prefix+"k")
	// A well-formed announcement for a key holding garbage: the key is read, not the message
	// believed.
	c.Publish(ctx, other.cfg.channel, format+" 99 open 1 0 "+prefix+"str")
	eventually(t, time.Second, "garbage counted", func() bool { return other.Stats().Garbage >= before+3 })
	ob := lookup(t, other, "str")
	if ob.State() != breaker.Closed {
		t.Error("a forged announcement was believed")
	}
	if st := s.Stats(); st.Garbage == 0 || !st.Healthy {
		t.Errorf("stats %+v: garbage not counted, or counted as an outage", st)
	}

	// Once the garbage is removed, the key is shared again.
	c.Del(ctx, prefix+"str")
	lookup(t, s, "str").Trip()
	eventually(t, time.Second, "shared again", func() bool { return ob.State() == breaker.Open })
}

func lookup(t *testing.T, s *Store, name string) *breaker.Breaker {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byName[name].b
}

// TestStaleViewAdopts: a process that was away (here: attached late) meets a newer shared
// verdict and adopts it rather than overwriting it.
func TestStaleViewAdopts(t *testing.T) {
	srv := startRedis(t)
	prefix := freeKey(t)
	since := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	c := srv.Client()
	c.HSet(context.Background(), prefix+"k", "format", format, "epoch", "7", "state", "open",
		"since", encodeSince(since), "hos", "0")
	s := newStore(t, srv, prefix)
	b, err := s.NewBreaker("k", testPolicy())
	if err != nil {
		t.Fatal(err)
	}
	ready(t, s)
	if v := b.Verdict(); v.State != breaker.Open || !v.Since.Equal(since) {
		t.Fatalf("verdict %+v, want the stored open period", v)
	}
	if e := epoch(t, s, "k"); e != 7 {
		t.Errorf("epoch %d, want 7", e)
	}
}

// TestProbesNotShared: counters are never shared (DESIGN.md §5.10), the half-open probe
// successes included. Each process needs SuccessThreshold successes of its own; the first
// that gets them closes the circuit for all.
func TestProbesNotShared(t *testing.T) {
	srv := startRedis(t)
	prefix := freeKey(t)
	p := testPolicy()
	p.SuccessThreshold = 2
	one := newStore(t, srv, prefix)
	other := newStore(t, srv, prefix)
	a := mustBreaker(t, one, "a", "k", p)
	b := mustBreaker(t, other, "b", "k", p)
	ready(t, one)
	ready(t, other)

	// Both open on a period that started long ago: both due for half-open.
	c := srv.Client()
	openedAt := time.Now().Add(-2 * p.OpenTimeout)
	c.HSet(context.Background(), prefix+"k", "format", format, "epoch", "1", "state", "open",
		"since", encodeSince(openedAt), "hos", "0")
	settle(t, one)
	settle(t, other)
	eventually(t, 2*time.Second, "both adopt the open period", func() bool {
		return a.Verdict().State != breaker.Closed && b.Verdict().State != breaker.Closed
	})
	// a goes half-open with its first probe, and shares that; b follows into half-open.
	if err := a.Execute(context.Background(), succeed); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Second, "b adopts the half-open period", func() bool {
		return b.State() == breaker.HalfOpen
	})
	if err := b.Execute(context.Background(), succeed); err != nil {
		t.Fatal(err)
	}
	// Two successes in the fleet, one in each process: neither has reached the threshold.
	settle(t, one)
	settle(t, other)
	if sa, sb := a.State(), b.State(); sa != breaker.HalfOpen || sb != breaker.HalfOpen {
		t.Fatalf("states %v and %v after one probe success each, want both half-open", sa, sb)
	}
	if got := stored(t, c, prefix+"k"); got["state"] != "half_open" || got["hos"] != "0" {
		t.Fatalf("stored %v, want half_open with no count", got)
	}
	if ca, cb := a.Counts(), b.Counts(); ca.Successes != 1 || cb.Successes != 1 {
		t.Fatalf("counts %+v and %+v, want each process's own one success", ca, cb)
	}
	// a's second success closes a, and its Closed verdict closes b.
	if err := a.Execute(context.Background(), succeed); err != nil {
		t.Fatal(err)
	}
	if a.State() != breaker.Closed {
		t.Fatalf("a is %v after two probe successes", a.State())
	}
	eventually(t, 2*time.Second, "b adopts the Closed verdict", func() bool {
		return b.State() == breaker.Closed
	})
	if got := stored(t, c, prefix+"k"); got["state"] != "closed" {
		t.Errorf("stored %v", got)
	}
}

func TestRegistry(t *testing.T) {
	srv := startRedis(t)
	prefix := freeKey(t)
	one := newStore(t, srv, prefix)
	other := newStore(t, srv, prefix)
	r1, err := one.NewRegistry(testPolicy())
	if err != nil {
		t.Fatal(err)
	}
	r2, err := other.NewRegistry(testPolicy())
	if err != nil {
		t.Fatal(err)
	}
	a := r1.Get("payments")
	b := r2.Get("payments") // created after the registry was attached
	eventually(t, 2*time.Second, "registry breakers attached", func() bool {
		return settle(t, one) && settle(t, other) && len(one.byNameSnapshot()) == 1 && len(other.byNameSnapshot()) == 1
	})
	trip(t, a, 5)
	eventually(t, shareWithin, "b opens", func() bool { return b.State() == breaker.Open })
}

func (s *Store) byNameSnapshot() map[string]*binding {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[string]*binding, len(s.byName))
	for k, v := range s.byName {
		m[k] = v
	}
	return m
}

func TestAttachErrors(t *testing.T) {
	srv := startRedis(t)
	s := newStore(t, srv, freeKey(t))
	b1, _ := breaker.New("x", testPolicy())
	b2, _ := breaker.New("x", testPolicy())
	if err := s.Attach(b1, ""); err == nil {
		t.Error("empty key accepted")
	}
	if err := s.Attach(b1, "k"); err != nil {
		t.Fatal(err)
	}
	if err := s.Attach(b1, "k"); err != nil {
		t.Errorf("re-attach: %v", err)
	}
	if err := s.Attach(b2, "k"); err == nil {
		t.Error("a second breaker with the same name accepted")
	}
	s.Close()
	if err := s.Attach(b2, "k"); err != ErrClosed {
		t.Errorf("attach after close: %v", err)
	}
}

// TestCloseStopsGoroutines: Close leaves no goroutine of the store or its subscription.
func TestCloseStopsGoroutines(t *testing.T) {
	srv := startRedis(t)
	client := srv.Client()
	cycle := func() {
		s, err := New(client, WithPrefix(freeKey(t)), WithLogger(quietLogger(t)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.NewBreaker("b", testPolicy()); err != nil {
			t.Fatal(err)
		}
		ready(t, s)
		s.Close()
		s.Close() // idempotent
	}
	cycle() // the client's own connections and goroutines, which it keeps
	time.Sleep(50 * time.Millisecond)
	before := runtime.NumGoroutine()
	for range 5 {
		cycle()
	}
	eventually(t, 2*time.Second, "goroutines return to their number before", func() bool {
		return runtime.NumGoroutine() <= before
	})
}

func TestOptions(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for _, o := range []Option{WithTTL(0), WithPollInterval(0), WithOpTimeout(-1)} {
		if s, err := New(c, o); err == nil {
			s.Close()
			t.Error("invalid option accepted")
		}
	}
	if _, err := New(nil); err == nil {
		t.Error("nil client accepted")
	}
	s, err := New(c, WithPrefix("app:cb:"), WithApplication(""))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.cfg.channel != "app:cb" {
		t.Errorf("channel %q", s.cfg.channel)
	}
}

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
	eventually(t, 5*time.Second, "b adopts the verdict", func() bool { return b.State() == breaker.Open })
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
