package counting

import (
	"fmt"
	"math"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// How the operator reads a node's entry (FromNode): bounded by its own pod cache, its
// times attested, its counts made consistent whatever the report says.

// anyPod is a bound that holds every pod to be bound to the node.
func anyPod(string, types.UID) bool { return true }

// maxNodeKeys is the most keys a node entry's schema admits: 400,000 keys of each of
// 1,024 pods.
const maxNodeKeys = breakerconfig.MaxKeyCount * resiliencev1alpha1.MaxNodePods

// withinBounds fails t unless e is an entry the operator can count: every count within
// [0, its schema bound], and every part at most its whole.
func withinBounds(t testing.TB, e Entry) {
	t.Helper()
	const most = resiliencev1alpha1.MaxNodeTrafficSum
	checks := []struct {
		what     string
		n, bound int64
	}{
		{"pods", e.Pods, resiliencev1alpha1.MaxNodePods},
		{"closed + open + halfOpen", e.Closed + e.Open + e.HalfOpen, e.Pods},
		{"earnedOpen", e.EarnedOpen, e.Open},
		{"earnedClosed", e.EarnedClosed, e.Closed},
		{"holdingVerdict", e.HoldingVerdict, e.Pods},
		{"onLatestConfig", e.OnLatestConfig, e.Pods},
		{"configErrors", e.ConfigErrors, e.Pods},
		{"consecutiveOpens", int64(e.ConsecutiveOpens), math.MaxInt32},
		{"openTimeout", int64(e.OpenTimeout), math.MaxInt64},
		{"configGeneration", e.ConfigGeneration, math.MaxInt64},
		{"calls", e.Calls, most},
		{"failures", e.Failures, e.Calls},
		{"requests", e.Traffic.Requests, most},
		{"accepts", e.Traffic.Accepts, e.Traffic.Requests},
		{"retries", e.Traffic.Retries, e.Traffic.Requests},
		{"throttled", e.Traffic.Throttled, e.Traffic.Requests},
		{"inFlightPeak", e.InFlight.Peak, resiliencev1alpha1.MaxNodeInFlight},
		{"limited", e.InFlight.Limited, most},
		{"baseline", int64(e.InFlight.Baseline), int64(breakerconfig.MaxBaseline)},
		{"notable", int64(len(e.Notable)), min(e.Pods, resiliencev1alpha1.MaxNotablePods)},
	}
	if r := e.FailureRate; r != nil {
		checks = append(checks, struct {
			what     string
			n, bound int64
		}{"failureRate", int64(*r), 100})
	}
	if k := e.Keys; k != nil {
		checks = append(checks, []struct {
			what     string
			n, bound int64
		}{
			{"keys", k.Keys, maxNodeKeys}, {"keys.open + keys.halfOpen", k.Open + k.HalfOpen, k.Keys},
			{"keys.most", k.Most, breakerconfig.MaxKeyCount}, {"keys.worst", int64(len(k.Worst)), breakerconfig.MaxWorstKeys},
		}...)
	}
	if c := e.Candidate; c != nil {
		checks = append(checks, []struct {
			what     string
			n, bound int64
		}{
			{"candidate.pods", c.Pods, e.Pods}, {"candidate.open + candidate.halfOpen", c.Open + c.HalfOpen, c.Pods},
			{"candidate.opens", c.Opens, most}, {"candidate.wouldRefuse", c.WouldRefuse, most},
			{"candidate.enforcedOpens", c.EnforcedOpens, most}, {"candidate.refused", c.Refused, most},
			{"candidate.timeOpen", int64(c.TimeOpen), math.MaxInt64}, {"candidate.enforcedTimeOpen", int64(c.EnforcedTimeOpen), math.MaxInt64},
		}...)
	}
	for _, c := range checks {
		if c.n < 0 || c.n > c.bound || c.bound < 0 {
			t.Errorf("%s %d, want within [0, %d]: %+v", c.what, c.n, c.bound, e)
		}
	}
}

// nodeEntry is a node's honest entry for breaker "b": what Node makes of its pods' lines.
func nodeEntry(t *testing.T) resiliencev1alpha1.NodeBreakerEntry {
	s := time.Second
	judging := wire(closed, started, 0, 2)
	judging.Candidate = &breakerconfig.CandidateEntry{State: breakerconfig.StateOpen, Since: breakerconfig.NewTime(t0), Opens: 3, WouldRefuse: 40,
		StartTime: ptr.To(breakerconfig.NewTime(t0.Add(-time.Minute))), TimeOpen: ptr.To(breakerconfig.Duration(5 * s)),
		Enforced: &breakerconfig.CandidateBaseline{Opens: 1, Refused: 7}}
	refusing := wire(closed, started, 0, 1)
	refusing.ConfigError = "window: must be positive"
	tripped := withWindow(wire(open, tripped, 5*s, 2), 40, 60, 100, 40, 3, 1)
	tripped.ConsecutiveOpens, tripped.OpenTimeout = 2, ptr.To(breakerconfig.Duration(4*s))
	return onlyEntry(t, linesOf("web",
		tripped, withWindow(wire(open, failed, 7*s, 2), 20, 100, 50, 0, 0, 0),
		wire(halfOpen, timedOut, 2*s, 2), withWindow(wire(closed, succeeded, 9*s, 2), 10, 0, 80, 80, 0, 0),
		wire(closed, adopted, 3*s, 2), judging, refusing,
	))
}

func TestFromNodeTakesAnHonestEntryAsItIs(t *testing.T) {
	e := nodeEntry(t)
	for _, running := range []int64{int64(e.Pods), 1000} {
		got, capped := FromNode("node-a", &e, Seen{}, running, anyPod)
		withinBounds(t, got)
		if capped {
			t.Errorf("running %d: capped", running)
		}
		counts := []int64{got.Pods, got.Closed, got.Open, got.HalfOpen, got.EarnedOpen, got.EarnedClosed, got.HoldingVerdict,
			got.OnLatestConfig, got.ConfigErrors, got.ConfigGeneration, got.Calls, got.Failures,
			got.Traffic.Requests, got.Traffic.Accepts, got.Traffic.Retries, got.Traffic.Throttled, int64(got.ConsecutiveOpens)}
		want := []int64{int64(e.Pods), int64(e.Closed), int64(e.Open), int64(e.HalfOpen), int64(e.EarnedOpen), int64(e.EarnedClosed), int64(e.HoldingVerdict),
			int64(e.OnLatestConfig), int64(e.ConfigErrors), e.ConfigGeneration, e.Calls, e.Failures,
			e.Requests, e.Accepts, e.Retries, e.Throttled, int64(e.ConsecutiveOpens)}
		if fmt.Sprint(counts) != fmt.Sprint(want) {
			t.Errorf("running %d: counts %v\nwant %v", running, counts, want)
		}
		if got.Node != "node-a" || got.Pod != "" || got.Revision != "r1" || got.ConfigError != e.ConfigError || got.OpenTimeout != e.OpenTimeout.Duration ||
			!got.OpenSince.Equal(e.OpenSince.Time) || !got.ClosedSince.Equal(e.ClosedSince.Time) || got.FailureRate == nil || *got.FailureRate != int32(e.Failures*100/e.Calls) {
			t.Errorf("running %d: %+v\nfrom %+v", running, got, e)
		}
		c, w := got.Candidate, e.Candidate
		if c == nil || c.Pods != int64(w.Pods) || c.Open != int64(w.Open) || c.Opens != w.Opens || c.WouldRefuse != w.WouldRefuse ||
			c.EnforcedOpens != w.EnforcedOpens || c.Refused != w.Refused || c.TimeOpen != w.TimeOpen.Duration || !c.StartTime.Equal(w.StartTime.Time) {
			t.Errorf("running %d: candidate %+v\nfrom %+v", running, c, w)
		}
		if len(got.Notable) != len(e.Notable) {
			t.Fatalf("running %d: notable %+v, want %+v", running, got.Notable, e.Notable)
		}
		for i, m := range got.Notable {
			n := e.Notable[i]
			if m.Pod != n.Name || m.UID != n.UID || m.Node != "node-a" || m.Reason != n.Reason || m.Circuit.State != n.State || !m.Since.Equal(n.Since.Time) {
				t.Errorf("running %d: notable %d %+v, from %+v", running, i, m, n)
			}
		}
	}
	// A Group's entry keeps its keys.
	g := e
	g.Keys = &resiliencev1alpha1.NodeKeySummary{Keys: 300, Open: 20, HalfOpen: 5, Most: 120, Worst: []string{"h1", "h2"}}
	got, _ := FromNode("node-a", &g, Seen{}, int64(g.Pods), anyPod)
	if k := got.Keys; k == nil || k.Keys != 300 || k.Open != 20 || k.HalfOpen != 5 || k.Most != 120 || fmt.Sprint(k.Worst) != "[h1 h2]" {
		t.Errorf("keys %+v", got.Keys)
	}
}

// A node that claims more pods than the operator's cache has bound to it speaks for those
// it has, each of its counts scaled down with them.
func TestFromNodeCountsNoMorePodsThanTheNodeRuns(t *testing.T) {
	claim := resiliencev1alpha1.NodeBreakerEntry{
		Name: "b", Revision: "r1", Pods: 100, Closed: 40, Open: 60, EarnedOpen: 60, EarnedClosed: 10, HoldingVerdict: 20,
		OpenSince: &metav1.MicroTime{Time: t0}, ClosedSince: &metav1.MicroTime{Time: t0},
		ConfigGeneration: 1, OnLatestConfig: 90, ConfigErrors: 10, ConfigError: "bad",
		Calls: 10_000, Failures: 5_000, Requests: 100_000, Accepts: 80_000, Retries: 1_000, Throttled: 500,
		Keys:      &resiliencev1alpha1.NodeKeySummary{Keys: 1000, Open: 100, HalfOpen: 50, Most: 20},
		Candidate: &resiliencev1alpha1.NodeCandidateSummary{Pods: 100, Open: 30, HalfOpen: 10, Opens: 200, WouldRefuse: 2000, EnforcedOpens: 100, Refused: 1000},
	}
	for i := range resiliencev1alpha1.MaxNotablePods {
		claim.Notable = append(claim.Notable, resiliencev1alpha1.NotablePod{Name: fmt.Sprintf("p-%d", i), UID: types.UID(fmt.Sprint(i)), Reason: tripped,
			PodCircuit: resiliencev1alpha1.PodCircuit{State: open, Since: metav1.NewTime(t0)}})
	}
	got, capped := FromNode("node-a", &claim, Seen{}, 10, anyPod)
	withinBounds(t, got)
	counts := []int64{got.Pods, got.Closed, got.Open, got.HalfOpen, got.EarnedOpen, got.EarnedClosed, got.HoldingVerdict, got.OnLatestConfig, got.ConfigErrors,
		got.Calls, got.Failures, got.Traffic.Requests, got.Traffic.Accepts, got.Traffic.Retries, got.Traffic.Throttled,
		got.Keys.Keys, got.Keys.Open, got.Keys.HalfOpen, got.Keys.Most,
		got.Candidate.Pods, got.Candidate.Open, got.Candidate.HalfOpen, got.Candidate.Opens, got.Candidate.WouldRefuse, got.Candidate.EnforcedOpens, got.Candidate.Refused,
		int64(len(got.Notable))}
	want := []int64{10, 4, 6, 0, 6, 1, 2, 9, 1,
		1000, 500, 10_000, 8000, 100, 50,
		100, 10, 5, 20, // the most one pod holds is no sum: not scaled
		10, 3, 1, 20, 200, 10, 100,
		5}
	if !capped || fmt.Sprint(counts) != fmt.Sprint(want) {
		t.Errorf("capped %v, counts %v\nwant %v", capped, counts, want)
	}
	if got.FailureRate == nil || *got.FailureRate != 50 {
		t.Errorf("failure rate %v, want the sums', 50", deref(got.FailureRate))
	}
	// Two pods: two notable pods at most.
	if got, _ := FromNode("node-a", &claim, Seen{}, 2, anyPod); got.Pods != 2 || len(got.Notable) != 2 || got.Open != 1 {
		t.Errorf("two pods running: %+v", got)
	}
	// None, or a cache that says less than none: nothing counts.
	for _, running := range []int64{0, -5} {
		got, capped := FromNode("node-a", &claim, Seen{}, running, anyPod)
		withinBounds(t, got)
		if !capped || got.Pods != 0 || got.Open != 0 || got.EarnedOpen != 0 || got.Calls != 0 || got.Notable != nil || !got.OpenSince.IsZero() {
			t.Errorf("running %d: %+v", running, got)
		}
	}
}

// A notable pod the operator's cache does not have bound to the node, under its name and
// UID, is dropped; the entry says it was capped.
func TestFromNodeDropsNotablePodsNotBoundThere(t *testing.T) {
	e := nodeEntry(t)
	stranger := e.Notable[1].Name
	bound := func(name string, uid types.UID) bool { return name != stranger && uid == types.UID("uid-"+name) }
	got, capped := FromNode("node-a", &e, Seen{}, int64(e.Pods), bound)
	if !capped || len(got.Notable) != len(e.Notable)-1 {
		t.Fatalf("capped %v, notable %+v", capped, got.Notable)
	}
	for _, m := range got.Notable {
		if m.Pod == stranger {
			t.Errorf("%s kept", stranger)
		}
	}
	if got.Pods != int64(e.Pods) || got.EarnedOpen != int64(e.EarnedOpen) {
		t.Errorf("the counts moved with a notable pod dropped: %+v", got)
	}
	// A pod of the name under another UID is another pod.
	e.Notable[0].UID = "an-old-pod"
	if got, capped := FromNode("node-a", &e, Seen{}, int64(e.Pods), bound); !capped || len(got.Notable) != len(e.Notable)-2 {
		t.Errorf("capped %v, notable %+v", capped, got.Notable)
	}
}

// A since counts as at most the operator's first sight of it plus the skew: a node cannot
// date an Open or a Closed in the future and so pin the fleet to it.
func TestFromNodeAttestsItsTimes(t *testing.T) {
	future := t0.Add(time.Hour)
	e := resiliencev1alpha1.NodeBreakerEntry{
		Name: "b", Pods: 3, Open: 2, EarnedOpen: 1, Closed: 1, EarnedClosed: 1,
		OpenSince: &metav1.MicroTime{Time: future}, ClosedSince: &metav1.MicroTime{Time: future},
		Notable: []resiliencev1alpha1.NotablePod{
			{Name: "a", UID: "a", Reason: tripped, PodCircuit: resiliencev1alpha1.PodCircuit{State: open, Since: metav1.NewTime(future)}},
			{Name: "b", UID: "b", Reason: adopted, PodCircuit: resiliencev1alpha1.PodCircuit{State: open, Since: metav1.NewTime(t0.Add(-time.Minute))}},
		},
	}
	seen := Seen{OpenSince: t0, ClosedSince: t0.Add(time.Second), Notable: []time.Time{t0, t0}}
	got, _ := FromNode("node-a", &e, seen, 3, anyPod)
	if !got.OpenSince.Equal(t0.Add(MaxClockSkew)) || !got.ClosedSince.Equal(t0.Add(time.Second+MaxClockSkew)) {
		t.Errorf("openSince %s closedSince %s, want first sight + skew", got.OpenSince, got.ClosedSince)
	}
	if !got.Notable[0].Since.Equal(t0.Add(MaxClockSkew)) || !got.Notable[1].Since.Equal(t0.Add(-time.Minute)) {
		t.Errorf("notable since %s and %s, want first sight + skew and the pod's own", got.Notable[0].Since, got.Notable[1].Since)
	}
	// Never seen (a zero time): bounds nothing.
	if got, _ := FromNode("node-a", &e, Seen{}, 3, anyPod); !got.OpenSince.Equal(future) || !got.Notable[0].Since.Equal(future) {
		t.Errorf("unbounded: %s %s", got.OpenSince, got.Notable[0].Since)
	}
	// A since without the earned state it dates counts for nothing.
	e.EarnedOpen, e.EarnedClosed = 0, 0
	if got, _ := FromNode("node-a", &e, seen, 3, anyPod); !got.OpenSince.IsZero() || !got.ClosedSince.IsZero() {
		t.Errorf("openSince %s closedSince %s without earned states", got.OpenSince, got.ClosedSince)
	}
}

// What a report stored before the schema's bounds and rules (or written past them) holds
// counts within them.
func TestFromNodeClampsWhatTheSchemaBounds(t *testing.T) {
	const huge = math.MaxInt64
	for _, tc := range []struct {
		name  string
		entry func(e *resiliencev1alpha1.NodeBreakerEntry)
		check func(got Entry) bool
	}{
		{"pods past the bound", func(e *resiliencev1alpha1.NodeBreakerEntry) { e.Pods, e.Closed = math.MaxInt32, math.MaxInt32 },
			func(got Entry) bool {
				return got.Pods == resiliencev1alpha1.MaxNodePods && got.Closed == resiliencev1alpha1.MaxNodePods
			}},
		{"negative counts", func(e *resiliencev1alpha1.NodeBreakerEntry) {
			e.Closed, e.Open, e.HalfOpen, e.HoldingVerdict, e.ConsecutiveOpens, e.ConfigGeneration = -1, -2, -3, -4, -5, -6
			e.Calls, e.Failures, e.Requests, e.Accepts = -1, -1, -1, -1
			e.OpenTimeout = &metav1.Duration{Duration: -time.Hour}
		}, func(got Entry) bool {
			return got.Open == 0 && got.ConsecutiveOpens == 0 && got.ConfigGeneration == 0 && got.Calls == 0 && got.OpenTimeout == 0
		}},
		{"more states than pods", func(e *resiliencev1alpha1.NodeBreakerEntry) { e.Closed, e.Open, e.HalfOpen = 10, 10, 10 },
			func(got Entry) bool { return got.Open == 10 && got.HalfOpen == 0 && got.Closed == 0 }},
		{"more earned than in the state", func(e *resiliencev1alpha1.NodeBreakerEntry) {
			e.Open, e.EarnedOpen, e.Closed, e.EarnedClosed = 2, 9, 3, 9
		},
			func(got Entry) bool { return got.EarnedOpen == 2 && got.EarnedClosed == 3 }},
		{"failures beyond calls", func(e *resiliencev1alpha1.NodeBreakerEntry) { e.Calls, e.Failures = 10, 99 },
			func(got Entry) bool { return got.Failures == 10 && *got.FailureRate == 100 }},
		{"traffic past the bound, its parts past its requests", func(e *resiliencev1alpha1.NodeBreakerEntry) {
			e.Calls, e.Requests, e.Accepts, e.Retries, e.Throttled = huge, 10, huge, 11, 12
		}, func(got Entry) bool {
			return got.Calls == resiliencev1alpha1.MaxNodeTrafficSum && got.Traffic == Window{10, 10, 10, 10}
		}},
		{"keys past the bound", func(e *resiliencev1alpha1.NodeBreakerEntry) {
			e.Keys = &resiliencev1alpha1.NodeKeySummary{Keys: math.MaxInt32, Open: math.MaxInt32, HalfOpen: math.MaxInt32, Most: math.MaxInt32}
		}, func(got Entry) bool {
			return got.Keys.Keys == maxNodeKeys && got.Keys.Open == maxNodeKeys && got.Keys.HalfOpen == 0 && got.Keys.Most == breakerconfig.MaxKeyCount
		}},
		{"a candidate past the bounds", func(e *resiliencev1alpha1.NodeBreakerEntry) {
			e.Candidate = &resiliencev1alpha1.NodeCandidateSummary{Pods: 99, Open: 99, HalfOpen: 99, Opens: huge, WouldRefuse: -1,
				TimeOpen: &metav1.Duration{Duration: -time.Hour}}
		}, func(got Entry) bool {
			c := got.Candidate
			return c.Pods == 10 && c.Open == 10 && c.HalfOpen == 0 && c.Opens == resiliencev1alpha1.MaxNodeTrafficSum && c.WouldRefuse == 0 && c.TimeOpen == 0
		}},
		{"more notable pods than the bound", func(e *resiliencev1alpha1.NodeBreakerEntry) {
			for i := range 9 {
				e.Notable = append(e.Notable, resiliencev1alpha1.NotablePod{Name: fmt.Sprint(i), UID: "u", Reason: tripped})
			}
		}, func(got Entry) bool { return len(got.Notable) == resiliencev1alpha1.MaxNotablePods }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := resiliencev1alpha1.NodeBreakerEntry{Name: "b", Pods: 10}
			tc.entry(&e)
			got, _ := FromNode("node-a", &e, Seen{}, 1<<40, anyPod)
			withinBounds(t, got)
			if !tc.check(got) {
				t.Errorf("%+v\nfrom %+v", got, e)
			}
		})
	}
}
