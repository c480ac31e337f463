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
	t.Parallel()
	var out bytes.Buffer
	if err := run(context.Background(), &out); err != nil {
		t.Fatalf("run: %v\n%s", err, &out)
	}
	t.Logf("output:\n%s", &out)
	inOrder(t, out.String(),
		`answered "quote #1"`,
		"failed (no answer within 1s)",
		"circuit closed → open: 4 of the last 8 calls failed",
		`not called (circuit open): from the cache: "quote #4"`,
		"circuit open → half_open",
		"probe, with a 500ms timeout: no",
		"circuit half_open → open: the probe failed",
		"circuit open → half_open",
		"probe, with a 500ms timeout: answered",
		"circuit half_open → closed: 2 probes in a row succeeded",
		"Done:",
	)
}

// TestNarrationOrder checks that each transition is printed after the call that caused
// it, and a transition to half-open before the probe it lets through: the fourth failure
// comes before "4 of the last 8 calls failed", not after it.
func TestNarrationOrder(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := run(context.Background(), &out); err != nil {
		t.Fatalf("run: %v\n%s", err, &out)
	}
	lines := strings.Split(out.String(), "\n")
	opened := find(t, lines, "circuit closed → open: 4 of the last 8 calls failed")
	if n := count(lines[:opened], "  failed ("); n != 4 {
		t.Errorf("%d failed calls printed before the circuit opened on 4 failures:\n%s", n, &out)
	}
	want(t, lines, opened-1, "  failed (no answer within 1s)")
	reopened := find(t, lines, "circuit half_open → open: the probe failed")
	want(t, lines, reopened-2, "  probe, with a 500ms timeout: no")
	want(t, lines, reopened-1, "  failed (no answer within 500ms)")
	want(t, lines, find(t, lines, "circuit open → half_open")+1, "  probe, with a 500ms timeout:")
	closed := find(t, lines, "circuit half_open → closed: 2 probes in a row succeeded")
	want(t, lines, closed-2, "  probe, with a 500ms timeout: answered")
	want(t, lines, closed-1, "  probe, with a 500ms timeout: answered")
	if t.Failed() {
		t.Logf("output:\n%s", &out)
	}
}

// find returns the index of the first line that contains s.
func find(t *testing.T, lines []string, s string) int {
	t.Helper()
	for i, l := range lines {
		if strings.Contains(l, s) {
			return i
		}
	}
	t.Fatalf("no line contains %q:\n%s", s, strings.Join(lines, "\n"))
	return -1
}

func count(lines []string, prefix string) int {
	n := 0
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

// want fails t unless line i starts with prefix.
func want(t *testing.T, lines []string, i int, prefix string) {
	t.Helper()
	if i < 0 || i >= len(lines) || !strings.HasPrefix(lines[i], prefix) {
		got := "(none)"
		if i >= 0 && i < len(lines) {
			got = lines[i]
		}
		t.Errorf("line %d is %q, want it to start with %q", i, got, prefix)
	}
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
