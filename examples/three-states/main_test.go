package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestRun runs the example and checks that its story happened: the circuit opened on
// timeouts, answered from the cache while open, stayed open when the probe's shorter
// timeout ran out, and closed once probes answered in time.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), &out); err != nil {
		t.Fatalf("run: %v\n%s", err, &out)
	}
	t.Logf("output:\n%s", &out)
	inOrder(t, out.String(),
		`answered "quote #1"`,
		"failed (no answer within 300ms)",
		"circuit closed → open: 4 of the last 8 calls failed",
		`not called (circuit open): from the cache: "quote #4"`,
		"circuit open → half_open",
		"probe, with a 100ms timeout: no",
		"circuit half_open → open: the probe failed",
		"circuit open → half_open",
		"probe, with a 100ms timeout: answered",
		"circuit half_open → closed: 2 probes in a row succeeded",
		"Done:",
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
