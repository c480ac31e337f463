package breaker

import (
	"context"
	"sync/atomic"
	"testing"
)

// The concurrency limit's call path (docs/benchmarks.md, "Fleet concurrency: the call
// path"): closed Execute with a limit it never reaches, and with the adaptive limiter on,
// against BenchmarkExecuteClosed in the same run. Targets: +10 ns and +25 ns, 0 allocs.

// BenchmarkSlotFloor is what no concurrency limit can go below: taking a slot with a
// compare-and-swap against the limit and giving it back with an addition, on one
// uncontended word. A limited Execute is judged against ExecuteClosed plus this, measured
// in the same run.
func BenchmarkSlotFloor(b *testing.B) {
	var inFlight, limit atomic.Int64
	limit.Store(1000)
	for b.Loop() {
		if n := inFlight.Load(); n < limit.Load() && inFlight.CompareAndSwap(n, n+1) {
			inFlight.Add(-1)
		}
	}
}

func limitedBench(b *testing.B, adaptive bool) *Breaker {
	p := DefaultPolicy()
	p.MaxInFlight = 1000
	if adaptive {
		p.Adaptive = &AdaptiveConcurrency{}
	}
	br, err := New("bench", p)
	if err != nil {
		b.Fatal(err)
	}
	return br
}

func BenchmarkExecuteClosedLimited(b *testing.B) {
	br := limitedBench(b, false)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_ = br.Execute(ctx, succeed)
	}
}

func BenchmarkExecuteClosedAdaptive(b *testing.B) {
	br := limitedBench(b, true)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_ = br.Execute(ctx, succeed)
	}
}

func BenchmarkAllowClosedLimited(b *testing.B) {
	br := limitedBench(b, false)
	b.ReportAllocs()
	for b.Loop() {
		done, err := br.Allow()
		if err == nil {
			done(nil)
		}
	}
}

func BenchmarkExecuteClosedLimitedParallel(b *testing.B) {
	br := limitedBench(b, false)
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_ = br.Execute(ctx, succeed)
		}
	})
}

// BenchmarkExecuteLimitedRefused is the refusal of a call over the limit (MaxWait 0).
func BenchmarkExecuteLimitedRefused(b *testing.B) {
	p := DefaultPolicy()
	p.MaxInFlight = 1
	br, err := New("bench", p)
	if err != nil {
		b.Fatal(err)
	}
	done, _ := br.Allow()
	defer done(nil)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_ = br.Execute(ctx, succeed)
	}
}
