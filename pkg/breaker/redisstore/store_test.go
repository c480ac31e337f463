package redisstore

import (
	"context"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
)

// shareWithin bounds how long the tests wait for a verdict to reach the other breakers.
// It is a liveness bound, wide enough for a loaded -race run; the speed itself (the
// target is 100ms) is measured by BenchmarkShareVerdict, not asserted by a timed test.
const shareWithin = 2 * time.Second

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
	eventually(t, patience, "every breaker adopts the winner's open period", func() bool {
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

	// Traffic on both breakers throughout, each call counted and its latency recorded.
	var slowest atomic.Int64
	var calls [2]atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, br := range []*breaker.Breaker{a, b} {
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
				calls[i].Add(1)
				time.Sleep(50 * time.Microsecond)
			}
		}()
	}

	time.Sleep(50 * time.Millisecond)
	srv.Kill()
	eventually(t, patience, "stores notice the outage", func() bool { return !one.Healthy() && !other.Healthy() })
	// Calls go on while Redis is away, on both breakers.
	for i, name := range []string{"a", "b"} {
		before := calls[i].Load()
		eventually(t, patience, name+" calls on while Redis is down", func() bool { return calls[i].Load() > before+100 })
	}

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
	took := eventually(t, patience, "b adopts a's verdict after Redis returns", func() bool {
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
	// The call path never touches Redis: calls went on while it was down (above), and what
	// one costs with the store attached, Redis up or down, is BenchmarkExecuteClosed's
	// figure (docs/benchmarks.md), not this test's: a bound on the slowest call here would
	// measure the scheduler of a loaded -race run.
	t.Logf("%d and %d calls, slowest %v", calls[0].Load(), calls[1].Load(), time.Duration(slowest.Load()))
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
	eventually(t, patience, "the failure is counted", func() bool { return s.Stats().Errors > 0 })
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
	eventually(t, patience, "the verdict reaches Redis", func() bool {
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
	eventually(t, patience, "garbage counted", func() bool { return other.Stats().Garbage >= before+3 })
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
	eventually(t, patience, "shared again", func() bool { return ob.State() == breaker.Open })
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

// TestProbesNotShared: counters are never shared (docs/design.md §5.10), the half-open probe
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
	eventually(t, patience, "both adopt the open period", func() bool {
		return a.Verdict().State != breaker.Closed && b.Verdict().State != breaker.Closed
	})
	// a goes half-open with its first probe, and shares that; b follows into half-open.
	if err := a.Execute(context.Background(), succeed); err != nil {
		t.Fatal(err)
	}
	eventually(t, patience, "b adopts the half-open period", func() bool {
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
	eventually(t, patience, "b adopts the Closed verdict", func() bool {
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
	eventually(t, patience, "registry breakers attached", func() bool {
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
	eventually(t, patience, "goroutines return to their number before", func() bool {
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
