package counting

import (
	"slices"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// A node's sums are its typical pods' (docs/design.md §5.17 within the node): each pod's
// calls, traffic, keys and candidate counts count for at most maxShareOfMedian times the
// node's upper median pod's, or a floor if more, before they are summed.

// withWindow is e with a traffic window and the calls at its last transition.
func withWindow(e breakerconfig.ReportEntry, calls int64, rate int32, requests, accepts, retries, throttled int64) breakerconfig.ReportEntry {
	e.Calls, e.FailureRatePercent = ptr.To(calls), ptr.To(rate)
	e.Requests, e.Accepts, e.Retries, e.Throttled = ptr.To(requests), ptr.To(accepts), ptr.To(retries), ptr.To(throttled)
	return e
}

func TestNodeSumsCountAPodForAtMostFourTypicalOnes(t *testing.T) {
	pod := func(calls, requests int64) breakerconfig.ReportEntry {
		return withWindow(wire(closed, started, 0, 1), calls, 50, requests, requests/2, requests/10, requests/5)
	}
	for _, tc := range []struct {
		name                                string
		entries                             []breakerconfig.ReportEntry
		calls, failures                     int64
		requests, accepts, retries, throttl int64
	}{
		{"alike pods count in full", []breakerconfig.ReportEntry{pod(100, 1000), pod(100, 1000), pod(100, 1000)},
			300, 150, 3000, 1500, 300, 600},
		{"one pod a thousand times the others counts as four of them", []breakerconfig.ReportEntry{pod(100, 1000), pod(100, 1000), pod(100, 1000), pod(100, 1000), pod(100_000, 1_000_000)},
			4*100 + 400, 4*50 + 200, 4*1000 + 4000, 4*500 + 2000, 4*100 + 400, 4*200 + 800},
		{"three times the median counts in full", []breakerconfig.ReportEntry{pod(100, 1000), pod(100, 1000), pod(300, 3000)},
			500, 250, 5000, 2500, 500, 1000},
		{"a quiet node's bound is the floor, 4 × 20", []breakerconfig.ReportEntry{pod(3, 3), pod(2, 2), pod(1_000_000, 1_000_000)},
			3 + 2 + 80, 1 + 1 + 40, 3 + 2 + 80, 1 + 1 + 40, 0 + 0 + 8, 0 + 0 + 16},
		{"half the pods idle: the busy half counts in full", []breakerconfig.ReportEntry{pod(0, 0), pod(5000, 5000)},
			5000, 2500, 5000, 2500, 500, 1000},
		{"every pod at the bound", []breakerconfig.ReportEntry{pod(breakerconfig.MaxExactCount, breakerconfig.MaxTrafficCount), pod(breakerconfig.MaxTrafficCount, breakerconfig.MaxTrafficCount)},
			2 * breakerconfig.MaxTrafficCount, breakerconfig.MaxTrafficCount, 2 * breakerconfig.MaxTrafficCount, breakerconfig.MaxTrafficCount,
			2 * (breakerconfig.MaxTrafficCount / 10), 2 * (breakerconfig.MaxTrafficCount / 5)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := onlyEntry(t, linesOf("p", tc.entries...))
			got := []int64{e.Calls, e.Failures, e.Requests, e.Accepts, e.Retries, e.Throttled}
			want := []int64{tc.calls, tc.failures, tc.requests, tc.accepts, tc.retries, tc.throttl}
			if !slices.Equal(got, want) {
				t.Errorf("calls, failures, requests, accepts, retries, throttled = %v\nwant %v", got, want)
			}
		})
	}
	// A pod that reports no window counts as an empty one.
	e := onlyEntry(t, linesOf("p", wire(closed, started, 0, 1), pod(100, 1000)))
	if e.Calls != 100 || e.Requests != 1000 || e.Pods != 2 {
		t.Errorf("a pod without a window: %+v", e)
	}
}

// keys, open and halfOpen add up the pods' Groups, each pod's at most four times the
// node's upper median pod's keys (at least 4 × 1,024); most is the most one pod holds
// within that bound; worst names the keys not closed in the most pods, each pod naming a
// key once, as status text.
func TestNodeKeys(t *testing.T) {
	group := func(keys, open, halfOpen int32, worst ...string) breakerconfig.ReportEntry {
		e := wire(closed, started, 0, 1)
		e.Keys = &breakerconfig.KeySummary{Keys: keys, Open: open, HalfOpen: halfOpen, Worst: worst}
		return e
	}
	e := onlyEntry(t, linesOf("p",
		group(40, 3, 1, "h1", "h2", "h3", "h9"),
		group(55, 2, 0, "h2", "h3"),
		group(12, 0, 0),
		group(30, 4, 2, "h3", "h4", "\x1b[1Ah5", "h6", "h7"),
		wire(closed, started, 0, 1), // a pod whose library predates Groups
	))
	if k := e.Keys; k == nil || k.Keys != 137 || k.Open != 9 || k.HalfOpen != 3 || k.Most != 55 ||
		!slices.Equal(k.Worst, []string{"h3", "h2", "h1", "h4", "h5"}) {
		t.Errorf("keys %+v", e.Keys)
	}
	// A rogue pod of the bound counts as 4 × 1,024 keys, its open ones in proportion, and
	// names its key once.
	var pods []breakerconfig.ReportEntry
	for range 9 {
		pods = append(pods, group(100, 10, 0, "h1", "h2"))
	}
	pods = append(pods, group(breakerconfig.MaxKeyCount, breakerconfig.MaxKeyCount/2, 0, "evil", "evil", "evil", "evil", "evil"))
	bound := int32(maxShareOfMedian * minKeysBound)
	if k := onlyEntry(t, linesOf("p", pods...)).Keys; k.Keys != 900+bound || k.Open != 90+bound/2 || k.Most != bound ||
		!slices.Equal(k.Worst, []string{"h1", "h2", "evil"}) {
		t.Errorf("a rogue pod among nine: %+v", k)
	}
	if e := onlyEntry(t, linesOf("p", wire(closed, started, 0, 1))); e.Keys != nil {
		t.Errorf("no Group: keys %+v", e.Keys)
	}
}

// The candidate adds up the judgements of the pods on the newest generation that refuse
// nothing: a pod behind, or refusing, judges another candidate.
func TestNodeCandidate(t *testing.T) {
	start := func(d time.Duration) *breakerconfig.Time { t := breakerconfig.NewTime(t0.Add(d)); return &t }
	judging := func(gen int64, state string, opens, wouldRefuse int64, timeOpen, startedAt time.Duration) breakerconfig.ReportEntry {
		e := wire(closed, started, 0, gen)
		e.Candidate = &breakerconfig.CandidateEntry{State: state, Since: breakerconfig.NewTime(t0), Opens: opens, WouldRefuse: wouldRefuse,
			StartTime: start(startedAt), TimeOpen: ptr.To(breakerconfig.Duration(timeOpen)),
			Enforced: &breakerconfig.CandidateBaseline{Opens: 1, Refused: 10, TimeOpen: ptr.To(breakerconfig.Duration(time.Second))}}
		return e
	}
	refusing := judging(3, breakerconfig.StateOpen, 1000, 1000, time.Hour, 0)
	refusing.ConfigError = "candidate.window: must be greater than 0"
	e := onlyEntry(t, linesOf("p",
		judging(3, breakerconfig.StateOpen, 2, 100, 20*time.Second, -3*time.Minute),
		judging(3, breakerconfig.StateHalfOpen, 1, 50, 10*time.Second, -2*time.Minute),
		judging(3, breakerconfig.StateClosed, 0, 0, 0, -time.Minute),
		judging(3, breakerconfig.StateOpen, breakerconfig.MaxCandidateCount, breakerconfig.MaxCandidateCount, 30*time.Second, -4*time.Minute),
		judging(2, breakerconfig.StateOpen, 1000, 1000, time.Hour, 0), // behind
		refusing,
		wire(closed, started, 0, 3), // judges none
	))
	c := e.Candidate
	if c == nil {
		t.Fatal("no candidate")
	}
	// Opens: the upper median of 0, 1, 2, 10^12 is 2, so the rogue counts 4 × 2; wouldRefuse:
	// of 0, 50, 100, 10^12 it is 100, the rogue 400.
	if c.Pods != 4 || c.Open != 2 || c.HalfOpen != 1 || c.Opens != 3+8 || c.WouldRefuse != 150+400 || c.EnforcedOpens != 4 || c.Refused != 40 {
		t.Errorf("candidate %+v", c)
	}
	if c.TimeOpen.Duration != 20*time.Second || c.EnforcedTimeOpen.Duration != time.Second || !c.StartTime.Time.Equal(t0.Add(-2*time.Minute)) {
		t.Errorf("median pod's times: timeOpen %v enforced %v start %v", c.TimeOpen, c.EnforcedTimeOpen, c.StartTime)
	}
	if e := onlyEntry(t, linesOf("p", wire(closed, started, 0, 1))); e.Candidate != nil {
		t.Errorf("no candidate judged: %+v", e.Candidate)
	}
}
