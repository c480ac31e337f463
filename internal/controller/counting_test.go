package controller

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/counting"
)

func TestAgentCounted(t *testing.T) {
	const grace = 30 * time.Second
	agent := func(created time.Time, ready *corev1.PodCondition) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "fusebox-node-x", CreationTimestamp: metav1.NewTime(created)}}
		if ready != nil {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}, *ready}
		}
		return p
	}
	ready := func(s corev1.ConditionStatus, at time.Time) *corev1.PodCondition {
		return &corev1.PodCondition{Type: corev1.PodReady, Status: s, LastTransitionTime: metav1.NewTime(at)}
	}
	long := t0.Add(-time.Hour)
	for _, tc := range []struct {
		name       string
		agents     []*corev1.Pod
		missing    time.Time
		wantCounts bool
		wantUntil  time.Time
	}{
		{"Ready", []*corev1.Pod{agent(long, ready(corev1.ConditionTrue, long))}, time.Time{}, true, time.Time{}},
		{"not Ready for less than the grace", []*corev1.Pod{agent(long, ready(corev1.ConditionFalse, t0.Add(-10*time.Second)))}, time.Time{}, true, t0.Add(20 * time.Second)},
		{"not Ready for longer than the grace", []*corev1.Pod{agent(long, ready(corev1.ConditionFalse, t0.Add(-31*time.Second)))}, time.Time{}, false, time.Time{}},
		{"Ready unknown (its node silent) for longer than the grace", []*corev1.Pod{agent(long, ready(corev1.ConditionUnknown, t0.Add(-time.Minute)))}, time.Time{}, false, time.Time{}},
		{"just created, no Ready condition yet", []*corev1.Pod{agent(t0.Add(-5*time.Second), nil)}, time.Time{}, true, t0.Add(25 * time.Second)},
		{"created long ago, never Ready", []*corev1.Pod{agent(long, nil)}, time.Time{}, false, time.Time{}},
		{"an old agent going and a new one Ready", []*corev1.Pod{agent(long, ready(corev1.ConditionFalse, long)), agent(t0, ready(corev1.ConditionTrue, t0))}, time.Time{}, true, time.Time{}},
		{"neither Ready: the later one's grace", []*corev1.Pod{agent(long, ready(corev1.ConditionFalse, long)), agent(t0.Add(-time.Second), nil)}, time.Time{}, true, t0.Add(29 * time.Second)},
		{"no agent, gone a moment ago", nil, t0.Add(-time.Second), true, t0.Add(29 * time.Second)},
		{"no agent for longer than the grace", nil, t0.Add(-time.Minute), false, time.Time{}},
		{"no agent, never known", nil, time.Time{}, false, time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			counts, until := agentCounted(tc.agents, tc.missing, t0, grace)
			if counts != tc.wantCounts || !until.Equal(tc.wantUntil) {
				t.Errorf("counts %v until %s, want %v until %s", counts, until, tc.wantCounts, tc.wantUntil)
			}
		})
	}
}

// A change of one carrier's entry changes the snapshot of the breaker it names, and only
// that one: the other breakers keep theirs, and with it their aggregate.
func TestIndexKeepsTheSnapshotsOfBreakersThatDidNotChange(t *testing.T) {
	var idx entryIndex
	ns := idx.namespaceFor("ns")
	entry := func(breaker string, open int64) counting.Entry {
		return counting.Entry{Breaker: breaker, Node: "node-a", Pods: 10, Open: open, Closed: 10 - open}
	}
	pod := func(breaker string, s resiliencev1alpha1.State) counting.Entry {
		e := resiliencev1alpha1.BreakerReportEntry{Name: breaker, PodCircuit: resiliencev1alpha1.PodCircuit{State: s}}
		return counting.FromPod("web", &e, t0, "")
	}
	nodeA, web := carrier{node: "node-a"}, carrier{pod: "web"}
	idx.apply(ns, map[carrier]derived{
		nodeA: {exists: true, entries: []counting.Entry{entry("x", 0), entry("y", 0)}},
		web:   {exists: true, entries: []counting.Entry{pod("x", closed), pod("y", closed)}},
	})
	first, _ := idx.read(ns, []string{"x", "y"})
	if len(first.byBreaker["x"]) != 2 || len(first.byBreaker["y"]) != 2 {
		t.Fatalf("entries %v, want two of each", first.byBreaker)
	}
	idx.apply(ns, map[carrier]derived{nodeA: {exists: true, entries: []counting.Entry{entry("x", 3), entry("y", 0)}}})
	second, _ := idx.read(ns, []string{"x", "y"})
	if second.snapshots["x"] == first.snapshots["x"] {
		t.Error("x's entries changed, its snapshot did not")
	}
	if second.snapshots["y"] != first.snapshots["y"] {
		t.Error("y's entries did not change, its snapshot was made again")
	}
	if v := second.view(&resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "x"}}); v.Counts.Reporting != 11 || v.Counts.Open != 3 {
		t.Errorf("x counts %+v, want 11 reporting, 3 open", v.Counts)
	}
	idx.apply(ns, map[carrier]derived{nodeA: {}, web: {exists: true, entries: []counting.Entry{pod("y", closed)}}})
	third, _ := idx.read(ns, []string{"x", "y"})
	if len(third.byBreaker["x"]) != 0 || len(third.byBreaker["y"]) != 1 {
		t.Errorf("after node-a's report went and web stopped reporting x: %v", third.byBreaker)
	}
}
