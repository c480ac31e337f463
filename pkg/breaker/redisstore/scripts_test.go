package redisstore

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
)

// scriptStore is a store whose loop never touches the test's keys: the scripts are driven
// by hand.
func scriptStore(t *testing.T, srv *redisServer) *Store {
	return newStore(t, srv, freeKey(t))
}

func cas(t *testing.T, s *Store, key string, expect uint64, state breaker.State, since time.Time, hos int) casResult {
	t.Helper()
	res, err := s.runScript(casScript, key, format, expect, state.String(), encodeSince(since), hos, 0, 0,
		s.cfg.ttl.Milliseconds(), s.cfg.channel, s.writer)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestCompareAndSet(t *testing.T) {
	srv := startRedis(t)
	s := scriptStore(t, srv)
	c := srv.Client()
	key := freeKey(t) + "k"
	t0 := time.Unix(1_700_000_000, 5).UTC()
	t1 := t0.Add(time.Second)

	if r := cas(t, s, key, 0, breaker.Open, t0, 0); r.status != "ok" || r.v.epoch != 1 {
		t.Fatalf("first write: %+v", r)
	}
	// A second process that tripped on the same (empty) view loses and learns the winner.
	r := cas(t, s, key, 0, breaker.Open, t1, 0)
	if r.status != "conflict" || r.v.epoch != 1 || !r.v.since.Equal(t0) {
		t.Fatalf("same-view write: %+v", r)
	}
	if r := cas(t, s, key, 1, breaker.HalfOpen, t1, 0); r.status != "ok" || r.v.epoch != 2 {
		t.Fatalf("write on the current view: %+v", r)
	}
	// A stale process never overwrites a newer verdict.
	if r := cas(t, s, key, 1, breaker.Closed, t1, 0); r.status != "conflict" || r.v.epoch != 2 || r.v.state != breaker.HalfOpen {
		t.Fatalf("stale write: %+v", r)
	}
	if got := stored(t, c, key); got["epoch"] != "2" || got["state"] != "half_open" {
		t.Fatalf("stored %v", got)
	}
	// The key carries the TTL.
	if ttl := c.PTTL(context.Background(), key).Val(); ttl <= 0 || ttl > s.cfg.ttl {
		t.Errorf("TTL %v, want (0, %v]", ttl, s.cfg.ttl)
	}
	// A store that lost its data accepts the view of a process that knows more, above it.
	c.Del(context.Background(), key)
	if r := cas(t, s, key, 9, breaker.Open, t1, 0); r.status != "ok" || r.v.epoch != 10 {
		t.Fatalf("write after data loss: %+v", r)
	}
}

func TestScriptsLeaveGarbageAlone(t *testing.T) {
	srv := startRedis(t)
	s := scriptStore(t, srv)
	c := srv.Client()
	ctx := context.Background()
	prefix := freeKey(t)
	garbage := map[string]func(key string){
		"string":       func(k string) { c.Set(ctx, k, "hello", 0) },
		"list":         func(k string) { c.RPush(ctx, k, "a") },
		"foreign hash": func(k string) { c.HSet(ctx, k, "state", "open") },
		"bad epoch": func(k string) {
			c.HSet(ctx, k, "format", format, "epoch", "1e3", "state", "open", "since", "1", "hos", "0")
		},
		"bad state": func(k string) {
			c.HSet(ctx, k, "format", format, "epoch", "1", "state", "Open", "since", "1", "hos", "0")
		},
		"bad since": func(k string) {
			c.HSet(ctx, k, "format", format, "epoch", "1", "state", "open", "since", "-1", "hos", "0")
		},
		"missing fields": func(k string) { c.HSet(ctx, k, "format", format, "epoch", "1") },
	}
	for name, put := range garbage {
		t.Run(name, func(t *testing.T) {
			key := prefix + name
			put(key)
			before, _ := c.Dump(ctx, key).Result()
			if r := cas(t, s, key, 0, breaker.Open, time.Now(), 0); r.status != "garbage" || r.garbage == "" {
				t.Errorf("cas: %+v", r)
			}
			if after, _ := c.Dump(ctx, key).Result(); after != before {
				t.Error("the value was overwritten")
			}
		})
	}
}

// TestCompareAndSetRace: many writers acting on the same view, one winner.
func TestCompareAndSetRace(t *testing.T) {
	srv := startRedis(t)
	s := scriptStore(t, srv)
	key := freeKey(t) + "k"
	var wg sync.WaitGroup
	wins := make(chan time.Time, 50)
	start := make(chan struct{})
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			since := time.Unix(1_700_000_000, int64(i)).UTC()
			r, err := s.runScript(casScript, key, format, 0, "open", encodeSince(since), 0, 0, 0,
				s.cfg.ttl.Milliseconds(), s.cfg.channel, s.writer)
			if err != nil {
				t.Error(err)
			}
			if r.status == "ok" {
				wins <- since
			}
		}()
	}
	close(start)
	wg.Wait()
	if len(wins) != 1 {
		t.Fatalf("%d writers won, want 1", len(wins))
	}
}
