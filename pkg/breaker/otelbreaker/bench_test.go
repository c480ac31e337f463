package otelbreaker_test

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/observe"
	"github.com/fusebox-dev/fusebox/pkg/breaker/otelbreaker"
)

// BenchmarkExecute measures the observer's cost per call: the difference between
// "observed" and "plain" is the overhead, whose target is under 150 ns. The observer is a
// CallObserver, so the observed breaker also leaves the core's lock-free fast path: that
// is part of the overhead measured, and "nop-call-observer" shows how much of it.
func BenchmarkExecute(b *testing.B) {
	ctx := context.Background()
	p := breaker.DefaultPolicy()
	p.MinimumThroughput = 1 << 30 // never opens
	observed := func(b *testing.B) *breaker.Breaker {
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		b.Cleanup(func() { _ = mp.Shutdown(ctx) })
		obs, err := otelbreaker.New(mp)
		if err != nil {
			b.Fatal(err)
		}
		br, err := breaker.New("bench", p, breaker.WithObserver(obs))
		if err != nil {
			b.Fatal(err)
		}
		obs.Track(br)
		return br
	}
	plain := func(b *testing.B) *breaker.Breaker {
		br, err := breaker.New("bench", p)
		if err != nil {
			b.Fatal(err)
		}
		return br
	}
	nop := func(b *testing.B) *breaker.Breaker {
		br, err := breaker.New("bench", p, breaker.WithObserver(nopObserver{}))
		if err != nil {
			b.Fatal(err)
		}
		return br
	}
	for _, c := range []struct {
		name string
		br   func(*testing.B) *breaker.Breaker
		fn   func(context.Context) error
	}{
		{"success/plain", plain, succeed},
		{"success/nop-call-observer", nop, succeed},
		{"success/observed", observed, succeed},
		{"failure/plain", plain, fail},
		{"failure/observed", observed, fail},
	} {
		b.Run(c.name, func(b *testing.B) {
			br := c.br(b)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				_ = br.Execute(ctx, c.fn)
			}
		})
	}
}

// nopObserver is a CallObserver that does nothing: what any CallObserver costs.
type nopObserver struct{}

func (nopObserver) OnTransition(observe.Transition)   {}
func (nopObserver) OnCallStart(string, breaker.State) {}
func (nopObserver) OnCallEnd(observe.CallEvent)       {}
func (nopObserver) OnFallback(observe.CallEvent)      {}
func (nopObserver) OnRetry(string, bool)              {}
