package otelbreaker_test

import (
	"context"
	"errors"
	"testing"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
)

// breaker.concurrency_limited counts the calls the concurrency limit refused, which are
// rejected calls too and, through Call, fallbacks for the limit; breaker.concurrency_limit
// reports the limit in force of a tracked breaker, and nothing without one.
func TestConcurrencyInstruments(t *testing.T) {
	h := newHarness(t)
	if _, ok := h.collect()["breaker.concurrency_limit"]; ok {
		t.Error("a concurrency_limit gauge for a breaker without a limit")
	}
	p := h.b.Policy()
	p.MaxInFlight = 2
	if err := h.b.Update(p); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	d1, _ := h.b.Allow()
	d2, _ := h.b.Allow()
	for range 3 {
		if err := h.b.Execute(ctx, succeed); !errors.Is(err, breaker.ErrConcurrencyLimited) {
			t.Fatalf("over the limit: %v", err)
		}
	}
	_, _ = breaker.Call(ctx, h.b, breaker.Callbacks[int]{
		Closed: func(context.Context) (int, error) { return 0, nil },
		Open:   func(context.Context, error) (int, error) { return 1, nil },
	})
	d1(nil)
	d2(nil)
	got := h.collect()
	if v := value(t, got, "breaker.concurrency_limited", name); v != 4 {
		t.Errorf("breaker.concurrency_limited = %v, want 4", v)
	}
	if v := value(t, got, "breaker.calls", name, "circuit_breaker.outcome=rejected", "circuit_breaker.initial_state=closed"); v != 4 {
		t.Errorf("rejected closed calls = %v, want 4", v)
	}
	if v := value(t, got, "breaker.fallbacks", name, "circuit_breaker.reason=concurrency_limited"); v != 1 {
		t.Errorf("fallbacks for the limit = %v, want 1", v)
	}
	if v := value(t, got, "breaker.concurrency_limit", name); v != 2 {
		t.Errorf("breaker.concurrency_limit = %v, want 2", v)
	}
	if v := value(t, got, "breaker.active_calls", name, "circuit_breaker.state=closed"); v != 0 {
		t.Errorf("active calls %v after every call ended", v)
	}
}
