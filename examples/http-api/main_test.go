package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestRun runs the example and checks its story: 404s left the circuit closed and were not
// served from the cache, 503s opened it, nothing reached the API while it was open (the
// cache answered), and it closed again once the API was back.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), &out); err != nil {
		t.Fatalf("run: %v\n%s", err, &out)
	}
	t.Logf("output:\n%s", &out)
	inOrder(t, out.String(),
		"user 1: Ada Lovelace\n",
		"user 7: the API answered 404 Not Found (not a failure",
		"the circuit is closed: 6 calls, 0 failures",
		"user 1: Ada Lovelace, from the cache (the API answered 503 Service Unavailable)",
		"circuit closed → open: 6 of the last 12 calls failed",
		"user 1: Ada Lovelace, from the cache (not sent: the circuit is open)",
		"user 3: unavailable, and not in the cache (not sent: the circuit is open)",
		"the API received 0 of those 3 requests",
		"circuit open → half_open",
		"circuit half_open → closed: 2 probes in a row succeeded",
		"user 3: Grace Hopper\n",
	)
}

// inOrder fails t unless each of want appears in out after the one before it.
func inOrder(t *testing.T, out string, want ...string) {
	t.Helper()
	rest := out
	for _, w := range want {
		i := strings.Index(rest, w)
		if i < 0 {
			t.Fatalf("output lacks %q after what came before it:\n%s", w, out)
		}
		rest = rest[i+len(w):]
	}
}
