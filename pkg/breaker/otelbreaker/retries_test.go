package otelbreaker_test

import (
	"context"
	"errors"
	"testing"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
)

// breaker.retries counts what the retry budget allowed and refused; breaker.throttled the
// calls adaptive throttling rejected, each exactly as the callers saw them.
func TestRetriesAndThrottled(t *testing.T) {
	h := newHarness(t)
	p := h.b.Policy()
	p.FailureRatio, p.MinimumThroughput = 1, 1000 // the circuit stays closed
	p.Throttle = &breaker.Throttle{K: 1}
	p.RetryBudget = &breaker.RetryBudget{Percent: 50}
	if err := h.b.Update(p); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var throttled, allowed, refused float64
	// With no success in the window, most calls are soon rejected locally.
	for range 110 {
		if errors.Is(h.b.Execute(ctx, fail), breaker.ErrThrottled) {
			throttled++
		}
	}
	for range 20 {
		if h.b.AllowRetry() {
			allowed++
		} else {
			refused++
		}
	}
	if throttled == 0 || allowed == 0 || refused == 0 {
		t.Fatalf("throttled %v, retries allowed %v and refused %v: the fixture should produce all three", throttled, allowed, refused)
	}
	got := h.collect()
	if v := value(t, got, "breaker.throttled", name); v != throttled {
		t.Errorf("breaker.throttled = %v, callers saw %v", v, throttled)
	}
	if v := value(t, got, "breaker.retries", name, "circuit_breaker.outcome=allowed"); v != allowed {
		t.Errorf("allowed retries = %v, want %v", v, allowed)
	}
	if v := value(t, got, "breaker.retries", name, "circuit_breaker.outcome=refused"); v != refused {
		t.Errorf("refused retries = %v, want %v", v, refused)
	}
	if v := value(t, got, "breaker.calls", name, "circuit_breaker.outcome=rejected", "circuit_breaker.initial_state=closed"); v != throttled {
		t.Errorf("rejected closed calls = %v, want the %v throttled", v, throttled)
	}
}
