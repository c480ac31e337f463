package redisstore

import (
	"context"
	"testing"

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
	b.Run("redisstore", func(b *testing.B) {
		srv := startRedis(b)
		s := newStore(b, srv, freeKey(b))
		br, err := s.NewBreaker("bench", p)
		if err != nil {
			b.Fatal(err)
		}
		ready(b, s)
		run(b, br)
	})
}
