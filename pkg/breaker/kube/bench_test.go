package kube

import (
	"context"
	"log/slog"
	"net"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
)

func succeed(context.Context) error { return nil }

// BenchmarkExecuteReported is what a closed call costs a pod whose breakers the agent
// reports, against a plain breaker in the same run, with the API server away: the agent
// cannot reach it (nothing listens on its address), so its watch and its writes fail and
// retry the whole time. The call path must not notice: the reporter hears of transitions
// only, and writes on a goroutine of its own. test/kube's TestAPIServerOutage checks the
// behaviour on a real API server that stops; this is its figure (docs/benchmarks.md).
func BenchmarkExecuteReported(b *testing.B) {
	ctx := context.Background()
	run := func(b *testing.B, br *breaker.Breaker) {
		b.ReportAllocs()
		for b.Loop() {
			_ = br.Execute(ctx, succeed)
		}
	}
	b.Run("plain", func(b *testing.B) {
		br, err := breaker.New("payments", breaker.DefaultPolicy())
		if err != nil {
			b.Fatal(err)
		}
		run(b, br)
	})
	b.Run("api-server-away", func(b *testing.B) {
		ctx, cancel := context.WithCancel(ctx)
		a, err := Connect(ctx, Options{
			Config: &rest.Config{Host: "http://" + closedAddress(b)}, Namespace: "default", Pod: "bench", PodUID: "bench-uid",
			Logger: slog.New(slog.DiscardHandler),
		})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { cancel(); <-a.Done() })
		run(b, a.Registry().Get("payments"))
	})
}

// closedAddress is a loopback address nothing listens on: connections to it are refused.
func closedAddress(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}
