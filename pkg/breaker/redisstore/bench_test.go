package redisstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
)

// BenchmarkExecuteClosed compares a closed breaker's Execute with and without a Redis
// store attached. The store is an Observer but not a CallObserver, so the call path is the
// same; the target is within 2x of plain, with 0 allocs/op.
func BenchmarkExecuteClosed(b *testing.B) {
	ctx := context.Background()
	p := breaker.DefaultPolicy()
	run := func(b *testing.B, br *breaker.Breaker) {
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			_ = br.Execute(ctx, succeed)
		}
	}
	b.Run("plain", func(b *testing.B) {
		br, err := breaker.New("bench", p)
		if err != nil {
			b.Fatal(err)
		}
		run(b, br)
	})
	// attached is a breaker of a store that has reached its own redis-server.
	attached := func(b *testing.B) (*redisServer, *Store, *breaker.Breaker) {
		srv := startRedis(b)
		s := newStore(b, srv, freeKey(b))
		br, err := s.NewBreaker("bench", p)
		if err != nil {
			b.Fatal(err)
		}
		ready(b, s)
		return srv, s, br
	}
	b.Run("redisstore", func(b *testing.B) {
		_, _, br := attached(b)
		run(b, br)
	})
	// Redis killed under the store: its goroutine fails, retries and backs off, and the
	// call path must not notice (TestRedisKilledMidTraffic checks that calls go on).
	b.Run("redis-down", func(b *testing.B) {
		srv, s, br := attached(b)
		srv.Kill()
		eventually(b, patience, "the store notices the outage", func() bool { return !s.Healthy() })
		run(b, br)
	})
}

// BenchmarkShareVerdict measures how long an open verdict takes to reach a breaker of
// another process under the same key: one op is one trip in one store until the other
// store's breaker reports Open. The target is 100ms; docs/benchmarks.md has the figures.
func BenchmarkShareVerdict(b *testing.B) {
	srv := startRedis(b)
	prefix := freeKey(b)
	one := newStore(b, srv, prefix)
	other := newStore(b, srv, prefix)
	p := testPolicy()
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		key := fmt.Sprintf("k%d", i)
		tripper := mustBreaker(b, one, "a"+key, key, p)
		follower := mustBreaker(b, other, "b"+key, key, p)
		settle(b, one)
		settle(b, other)
		b.StartTimer()
		for range 5 {
			_ = tripper.Execute(ctx, fail)
		}
		for follower.State() != breaker.Open {
			time.Sleep(20 * time.Microsecond)
		}
	}
}
