package registry

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
)

func succeed(context.Context) error { return nil }

// benchGroup returns a Group holding n keys, and the keys.
func benchGroup(b *testing.B, n int) (*Group, []string) {
	g, err := NewGroup("bench", breaker.DefaultPolicy())
	if err != nil {
		b.Fatal(err)
	}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "tenant-" + strconv.Itoa(i)
		g.Get(keys[i])
	}
	return g, keys
}

// BenchmarkGroupExecuteClosed: look a key up among 1,000 and run a closed Execute on its
// breaker, one goroutine.
func BenchmarkGroupExecuteClosed(b *testing.B) {
	g, keys := benchGroup(b, 1000)
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		_ = g.Get(keys[i]).Execute(ctx, succeed)
		if i++; i == len(keys) {
			i = 0
		}
	}
}

// BenchmarkGroupExecuteClosedParallel: the same on every core, each goroutine walking the
// keys from its own starting point.
func BenchmarkGroupExecuteClosedParallel(b *testing.B) {
	g, keys := benchGroup(b, 1000)
	ctx := context.Background()
	var start atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := int(start.Add(397)) % len(keys)
		for pb.Next() {
			_ = g.Get(keys[i]).Execute(ctx, succeed)
			if i++; i == len(keys) {
				i = 0
			}
		}
	})
}

// BenchmarkGroupHotKeyParallel: every goroutine on one key of 1,000, the worst case for
// the shared line of the key's use stamp.
func BenchmarkGroupHotKeyParallel(b *testing.B) {
	g, keys := benchGroup(b, 1000)
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_ = g.Get(keys[500]).Execute(ctx, succeed)
		}
	})
}

// BenchmarkGroupChurn: every call a key the Group has never seen, at its bound of 1,000:
// each one creates a breaker and evicts the least recently used.
func BenchmarkGroupChurn(b *testing.B) {
	g, _ := benchGroup(b, 1000)
	g.SetMaxKeys(1000)
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		_ = g.Get("new-"+strconv.Itoa(i)).Execute(ctx, succeed)
		i++
	}
}
