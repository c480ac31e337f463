package counting

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"k8s.io/utils/ptr"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// Random pod lines for the properties of Node: anything an agent admits from its pods
// (breakerconfig's bounds), the extremes often.

// anyOf is a count in [0, most], 0, most and small counts often.
func anyOf(rnd *rand.Rand, most int64) int64 {
	switch rnd.IntN(5) {
	case 0:
		return 0
	case 1:
		return most
	case 2:
		return rnd.Int64N(min(100, most) + 1)
	}
	return rnd.Int64N(most + 1)
}

// anyText is a pod's text: plain, long, or full of control characters and escapes.
func anyText(rnd *rand.Rand, most int) string {
	switch rnd.IntN(4) {
	case 0:
		return "window: must be positive"
	case 1:
		return strings.Repeat("x", rnd.IntN(most+1))
	case 2:
		return "\x1b]0;owned\x07\x1b[2J bad\tconfig\u202e\x00 " + strings.Repeat("é", rnd.IntN(most/2))
	}
	return "\u009b2J" + strings.Repeat(" ", rnd.IntN(10))
}

// randomEntry is one pod's entry of breaker name, as its agent admits it.
func randomEntry(rnd *rand.Rand, name string, group bool) breakerconfig.ReportEntry {
	states := []resiliencev1alpha1.State{closed, open, halfOpen}
	reasons := []string{started, tripped, manual, failed, succeeded, timedOut, adopted, forced}
	e := wire(states[rnd.IntN(3)], reasons[rnd.IntN(len(reasons))], time.Duration(rnd.Int64N(int64(time.Hour)))-time.Minute, rnd.Int64N(4))
	e.Name = name
	if rnd.IntN(3) > 0 {
		e.Calls = ptr.To(anyOf(rnd, breakerconfig.MaxExactCount))
		e.FailureRatePercent = ptr.To(int32(anyOf(rnd, 100)))
		e.Trigger = []string{"", breakerconfig.TriggerFailureRate, breakerconfig.TriggerSlowCallRate, breakerconfig.TriggerFailedProbe, breakerconfig.TriggerSlowProbe}[rnd.IntN(5)]
	}
	if rnd.IntN(2) == 0 {
		e.ConsecutiveOpens = int32(anyOf(rnd, math.MaxInt32))
		e.OpenTimeout = ptr.To(breakerconfig.Duration(rnd.Int64N(int64(time.Hour))))
	}
	if rnd.IntN(2) == 0 {
		requests := anyOf(rnd, breakerconfig.MaxTrafficCount)
		e.Requests, e.Accepts = ptr.To(requests), ptr.To(anyOf(rnd, requests))
		e.Retries, e.Throttled = ptr.To(anyOf(rnd, requests)), ptr.To(anyOf(rnd, requests))
	}
	if rnd.IntN(2) == 0 {
		e.InFlightPeak, e.Limited = ptr.To(anyOf(rnd, breakerconfig.MaxInFlight)), ptr.To(anyOf(rnd, breakerconfig.MaxTrafficCount))
		if rnd.IntN(2) == 0 {
			e.Baseline = ptr.To(breakerconfig.Duration(anyOf(rnd, int64(breakerconfig.MaxBaseline))))
		}
	}
	if group {
		keys := int32(anyOf(rnd, breakerconfig.MaxKeyCount))
		k := &breakerconfig.KeySummary{Keys: keys, Open: int32(anyOf(rnd, int64(keys))), HalfOpen: int32(anyOf(rnd, breakerconfig.MaxKeyCount))}
		for range rnd.IntN(breakerconfig.MaxWorstKeys + 1) {
			k.Worst = append(k.Worst, []string{"h1", "h2", "h3", "\x1b[1Ah4", "", strings.Repeat("k", 253)}[rnd.IntN(6)])
		}
		e.Keys = k
	}
	if rnd.IntN(3) == 0 {
		start := breakerconfig.NewTime(t0.Add(-time.Duration(rnd.Int64N(int64(time.Hour)))))
		e.Candidate = &breakerconfig.CandidateEntry{
			State: string(states[rnd.IntN(3)]), Since: breakerconfig.NewTime(t0), StartTime: &start,
			Opens: anyOf(rnd, breakerconfig.MaxCandidateCount), WouldRefuse: anyOf(rnd, breakerconfig.MaxCandidateCount),
			TimeOpen: ptr.To(breakerconfig.Duration(rnd.Int64N(int64(time.Hour)) - int64(time.Minute))),
			Enforced: &breakerconfig.CandidateBaseline{Opens: anyOf(rnd, breakerconfig.MaxCandidateCount), Refused: anyOf(rnd, breakerconfig.MaxCandidateCount)},
		}
	}
	if rnd.IntN(4) == 0 {
		e.ConfigError = anyText(rnd, breakerconfig.MaxConfigErrorSize)
	}
	return e
}

// randomLines is the lines of n pods of one node: each reports breaker "b", some "c", and
// "g", a Group; at one of two revisions, or none.
func randomLines(rnd *rand.Rand, n int) []PodLine {
	lines := make([]PodLine, n)
	for i := range lines {
		revision := []string{"r1", "r2", ""}[rnd.IntN(3)]
		entries := []breakerconfig.ReportEntry{randomEntry(rnd, "b", false)}
		if rnd.IntN(2) == 0 {
			entries = append(entries, randomEntry(rnd, "c", false))
		}
		if rnd.IntN(3) == 0 {
			entries = append(entries, randomEntry(rnd, "g", true))
		}
		lines[i] = podLine(fmt.Sprintf("web-%03d", i), revision, entries...)
	}
	return lines
}
