package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestRun runs the example and checks its story: the blip opens the candidate and not the
// enforced circuit, no call is refused, the candidate counts the calls it would have
// refused, half-opens after its open period and closes on two probes that ran.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), &out); err != nil {
		t.Fatalf("run: %v\n%s", err, &out)
	}
	t.Logf("output:\n%s", &out)
	s := out.String()
	for _, want := range []string{
		"call  5: failed (dependency unavailable) enforced closed candidate open      would have refused 0",
		"call 12: answered                 enforced closed candidate open      would have refused 7",
		"The enforced policy rode the blip out: it refused 0 calls.",
		"after 500ms: candidate half_open",
		"probe 2: answered                 enforced closed candidate closed",
		"enforced opened 0 times and refused 0 calls; the candidate opened 1 time(s)",
		"would have refused 7 calls.",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("the output does not say %q", want)
		}
	}
	if strings.Contains(s, "refused  ") || strings.Count(s, ": refused") > 0 {
		t.Errorf("a call was refused:\n%s", s)
	}
}
