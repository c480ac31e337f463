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

// TestRetryBudget checks the retry chapter: the flaky API's failures are retried while the
// retries stay within 20% of the first attempts, and then the budget refuses one, so the
// caller gets the 503 of a request sent once.
func TestRetryBudget(t *testing.T) {
	var out bytes.Buffer
	if err := retryWithinBudget(context.Background(), &out); err != nil {
		t.Fatalf("retryWithinBudget: %v\n%s", err, &out)
	}
	t.Logf("output:\n%s", &out)
	inOrder(t, out.String(),
		"quotes 1 to 10 answered, each sent once",
		"quote 11: \"the best way out is always through\" (sent twice)",
		"quote 12: \"the best way out is always through\" (sent twice)",
		"quote 13: the API answered 503 Service Unavailable, sent once: the budget refused a retry (2 retries made; 20% of 13 first attempts allows 2.6)",
	)
}

// TestNarrationOrder checks that each transition is printed after the request that caused
// it, and a transition to half-open before the probe it lets through: the sixth 503 comes
// before "6 of the last 12 calls failed", not after it.
func TestNarrationOrder(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), &out); err != nil {
		t.Fatalf("run: %v\n%s", err, &out)
	}
	lines := strings.Split(out.String(), "\n")
	const failed = "from the cache (the API answered 503 Service Unavailable)"
	opened := find(t, lines, "circuit closed → open: 6 of the last 12 calls failed")
	n := 0
	for _, l := range lines[:opened] {
		if strings.HasSuffix(l, failed) {
			n++
		}
	}
	if n != 6 {
		t.Errorf("%d failed requests printed before the circuit opened on 6 failures:\n%s", n, &out)
	}
	if !strings.HasSuffix(lines[opened-1], failed) {
		t.Errorf("the line before the circuit opened is %q, want a failed request", lines[opened-1])
	}
	halfOpen := find(t, lines, "circuit open → half_open")
	closed := find(t, lines, "circuit half_open → closed: 2 probes in a row succeeded")
	if closed != halfOpen+3 {
		t.Errorf("the circuit closed %d lines after it went half-open, want 3 (two probes between)", closed-halfOpen)
	}
	for _, i := range []int{halfOpen + 1, halfOpen + 2} {
		if !strings.HasPrefix(lines[i], "  user ") || strings.Contains(lines[i], "cache") {
			t.Errorf("line %d is %q, want a probe the API answered", i, lines[i])
		}
	}
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
