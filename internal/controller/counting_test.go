package controller

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// The counting rules of docs/design.md §9, without a cluster: which of what speaks for a
// pod counts.
func TestCountPod(t *testing.T) {
	pod := func(uid types.UID, node string, phase corev1.PodPhase) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-0", UID: uid}}
		p.Spec.NodeName, p.Status.Phase = node, phase
		return p
	}
	entries := func(state resiliencev1alpha1.State) []resiliencev1alpha1.BreakerReportEntry {
		return []resiliencev1alpha1.BreakerReportEntry{{Name: "b", State: state}}
	}
	own := func(owner types.UID) *resiliencev1alpha1.BreakerReport {
		return &resiliencev1alpha1.BreakerReport{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-0", UID: "report",
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "web-0", UID: owner}}},
			Breakers: entries(resiliencev1alpha1.StateClosed),
		}
	}
	line := func(node string, uid types.UID) nodeLine {
		return nodeLine{node: node, uid: uid, entries: entries(resiliencev1alpha1.StateOpen)}
	}
	agents := func(counted ...string) func(string) bool {
		return func(node string) bool { return slices.Contains(counted, node) }
	}
	const running = corev1.PodRunning
	for _, tc := range []struct {
		name        string
		pod         *corev1.Pod
		reports     podReports
		agents      func(string) bool
		wantCarrier string // "-" for nothing counted
		wantNode    string
		wantGone    bool
		wantWrong   []string
	}{
		{"its own report, running", pod("u1", "node-a", running), podReports{own: own("u1")}, agents(), ownCarrier, "", false, nil},
		{"its own report, pending (its containers may run before the phase says so)", pod("u1", "", corev1.PodPending), podReports{own: own("u1")}, agents(), ownCarrier, "", false, nil},
		{"its own report, ended", pod("u1", "node-a", corev1.PodSucceeded), podReports{own: own("u1")}, agents(), "-", "", false, nil},
		{"its own report, no pod", nil, podReports{own: own("u1")}, agents(), "-", "", true, nil},
		{"its own report, another pod of the name", pod("u2", "node-a", running), podReports{own: own("u1")}, agents(), "-", "", true, nil},
		{"its node's line", pod("u1", "node-a", running), podReports{lines: []nodeLine{line("node-a", "u1")}}, agents("node-a"), "node-a", "node-a", false, nil},
		{"its node's line, the agent not counted", pod("u1", "node-a", running), podReports{lines: []nodeLine{line("node-a", "u1")}}, agents(), "-", "node-a", false, nil},
		{"its node's line, ended", pod("u1", "node-a", corev1.PodFailed), podReports{lines: []nodeLine{line("node-a", "u1")}}, agents("node-a"), "-", "node-a", false, nil},
		{"another node's line", pod("u1", "node-a", running), podReports{lines: []nodeLine{line("node-b", "u1")}}, agents("node-a", "node-b"), "-", "", false, []string{"node-b"}},
		{"a line of a pod bound nowhere", pod("u1", "", corev1.PodPending), podReports{lines: []nodeLine{line("node-a", "u1")}}, agents("node-a"), "-", "", false, []string{"node-a"}},
		{"a line of an old pod of the name", pod("u2", "node-a", running), podReports{lines: []nodeLine{line("node-a", "u1")}}, agents("node-a"), "-", "", false, nil},
		{"a line of no pod", nil, podReports{lines: []nodeLine{line("node-a", "u1")}}, agents("node-a"), "-", "", false, nil},
		{"both forms: the node's line wins", pod("u1", "node-a", running), podReports{own: own("u1"), lines: []nodeLine{line("node-a", "u1")}}, agents("node-a"), "node-a", "node-a", false, nil},
		{"both forms, the agent not counted: nothing, the own report is kept", pod("u1", "node-a", running), podReports{own: own("u1"), lines: []nodeLine{line("node-a", "u1")}}, agents(), "-", "node-a", false, nil},
		{"both forms, the line from another node: the own report counts", pod("u1", "node-a", running), podReports{own: own("u1"), lines: []nodeLine{line("node-b", "u1")}}, agents("node-b"), ownCarrier, "", false, []string{"node-b"}},
		{"its node's line and another node's claim", pod("u1", "node-a", running), podReports{lines: []nodeLine{line("node-b", "u1"), line("node-a", "u1"), line("node-c", "u1")}}, agents("node-a", "node-b"), "node-a", "node-a", false, []string{"node-b", "node-c"}},
		{"its node's line and an old pod's own report", pod("u2", "node-a", running), podReports{own: own("u1"), lines: []nodeLine{line("node-a", "u2")}}, agents("node-a"), "node-a", "node-a", true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := countPod(tc.pod, tc.reports, tc.agents)
			switch {
			case tc.wantCarrier == "-" && len(c.entries) > 0:
				t.Errorf("counted %v from %q, want nothing", c.entries, c.carrier)
			case tc.wantCarrier != "-" && (len(c.entries) == 0 || c.carrier != tc.wantCarrier):
				t.Errorf("counted %d entries from %q, want those of %q", len(c.entries), c.carrier, tc.wantCarrier)
			}
			if c.node != tc.wantNode || c.gone != tc.wantGone || !slices.Equal(c.misbound, tc.wantWrong) {
				t.Errorf("node %q gone %v misbound %v, want %q %v %v", c.node, c.gone, c.misbound, tc.wantNode, tc.wantGone, tc.wantWrong)
			}
		})
	}
}

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

// A change of one pod's entry changes the snapshot of the breaker it names, and only that
// one: the other breakers keep theirs, and with it their aggregate.
func TestIndexKeepsTheSnapshotsOfBreakersThatDidNotChange(t *testing.T) {
	var idx memberIndex
	ns := idx.namespaceFor("ns")
	state := func(pod string, entries ...member) derived {
		for i := range entries {
			entries[i].pod = pod
		}
		return derived{state: &podState{members: entries}}
	}
	entry := func(breaker string, s resiliencev1alpha1.State) member {
		return member{entry: resiliencev1alpha1.BreakerReportEntry{Name: breaker, State: s}, since: t0}
	}
	idx.apply(ns, map[string]derived{
		"a": state("a", entry("x", closed), entry("y", closed)),
		"b": state("b", entry("x", closed), entry("y", closed)),
	})
	first, _ := idx.read(ns, []string{"x", "y"})
	if len(first.byBreaker["x"]) != 2 || len(first.byBreaker["y"]) != 2 {
		t.Fatalf("members %v, want two of each", first.byBreaker)
	}
	idx.apply(ns, map[string]derived{"a": state("a", entry("x", open), entry("y", closed))})
	second, _ := idx.read(ns, []string{"x", "y"})
	if second.snapshots["x"] == first.snapshots["x"] {
		t.Error("x's members changed, its snapshot did not")
	}
	if second.snapshots["y"] != first.snapshots["y"] {
		t.Error("y's members did not change, its snapshot was made again")
	}
	for _, m := range second.byBreaker["x"] {
		if want := map[string]resiliencev1alpha1.State{"a": open, "b": closed}[m.pod]; m.entry.State != want {
			t.Errorf("x's member %s is %s, want %s", m.pod, m.entry.State, want)
		}
	}
	idx.apply(ns, map[string]derived{"a": {}, "b": state("b", entry("y", closed))})
	third, _ := idx.read(ns, []string{"x", "y"})
	if len(third.byBreaker["x"]) != 0 || len(third.byBreaker["y"]) != 1 {
		t.Errorf("after a's report went and b stopped reporting x: %v", third.byBreaker)
	}
}

// First sight is the pod entry's, whatever object carried it: a pod that moves from its
// own BreakerReport to its node's agent keeps the first sight of an entry it still holds,
// and a node that claims the pod with another entry does not reset the pod's own.
func TestFirstSightIsThePodsWhateverCarriedIt(t *testing.T) {
	var o observations
	since := t0.Add(-time.Minute)
	opened := resiliencev1alpha1.BreakerReportEntry{Name: "b", State: open, Reason: tripped, Since: metav1.NewTime(since)}
	own := &resiliencev1alpha1.BreakerReport{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-0", UID: "report",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "web-0", UID: "pod-uid"}}},
		Breakers: []resiliencev1alpha1.BreakerReportEntry{opened},
	}
	o.observe(own, t0)
	node := func(name string, e resiliencev1alpha1.BreakerReportEntry) *resiliencev1alpha1.NodeBreakerReport {
		return &resiliencev1alpha1.NodeBreakerReport{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, NodeName: name,
			Pods: []resiliencev1alpha1.NodePodReport{{Name: "web-0", UID: "pod-uid", Breakers: []resiliencev1alpha1.BreakerReportEntry{e}}}}
	}
	moved := node("node-a", opened)
	o.observeNode(nil, moved, t0.Add(time.Hour))
	if got := o.firstSeenLine("ns", "node-a", &moved.Pods[0], t0.Add(2*time.Hour)); !got[0].Equal(t0) {
		t.Errorf("the entry carried by the node's report first seen %s, want %s, when its own report showed it", got[0], t0)
	}
	closedNow := opened
	closedNow.State, closedNow.Reason, closedNow.Since = closed, succeeded, metav1.NewTime(t0.Add(3*time.Hour))
	o.observeNode(nil, node("node-b", closedNow), t0.Add(3*time.Hour))
	if got := o.firstSeen(own, t0.Add(4*time.Hour)); !got[0].Equal(t0) {
		t.Errorf("another node's claim reset the pod's own first sight to %s", got[0])
	}
	o.forget(types.NamespacedName{Namespace: "ns", Name: "web-0"})
	o.forgetNode(moved)
	o.forgetNode(node("node-b", closedNow))
	if o.len() != 0 {
		t.Errorf("%d pods remembered after every carrier went", o.len())
	}
}
