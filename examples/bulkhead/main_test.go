package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestRun runs the example and checks its story: each pod holds its share and no more,
// the refusals leave every circuit closed, the fleet stays within the capacity before and
// after it doubles, and per-pod limits triple it.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), &out); err != nil {
		t.Fatalf("run: %v\n%s", err, &out)
	}
	t.Logf("output:\n%s", &out)
	s := out.String()
	for _, want := range []string{
		"  pod-1: 2 in flight, 8 refused by the limit (answered by the fallback); circuit closed",
		"3 pods, a share of 2 each: the fleet had 6 calls in flight (limit 6).",
		"  pod-6: 1 in flight, 9 refused by the limit (answered by the fallback); circuit closed",
		"6 pods, a share of 1 each: the fleet had 6 calls in flight (limit 6).",
		"Per-pod limits of 6 each instead: 3 pods had 18 calls in flight, 3 times the capacity.",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("the output does not say %q", want)
		}
	}
	if strings.Contains(s, "circuit open") {
		t.Errorf("a refusal by the limit opened a circuit:\n%s", s)
	}
}
