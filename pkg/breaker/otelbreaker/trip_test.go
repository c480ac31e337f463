package otelbreaker_test

import (
	"testing"
	"time"
)

// TestTripCountsOneTransition: Trip on an open circuit restarts its open period but is no
// state change, so three Trips on a closed circuit count one transition.
func TestTripCountsOneTransition(t *testing.T) {
	h := newHarness(t)
	for range 3 {
		h.b.Trip()
		h.clock.Advance(time.Second)
	}
	got := h.collect()
	if pts := got["breaker.transitions"]; len(pts) != 1 {
		t.Fatalf("transition series %v, want one", pts)
	}
	if v := value(t, got, "breaker.transitions", name, "circuit_breaker.from_state=closed", "circuit_breaker.to_state=open", "circuit_breaker.cause=trip"); v != 1 {
		t.Errorf("transitions after three Trips = %v, want 1", v)
	}
}
