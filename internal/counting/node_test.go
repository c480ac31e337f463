package counting

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// What a node agent writes (Node): per breaker and revision, what its pods add up to.

// wire is what a pod tells its agent of breaker "b": a state reached at t0+offset, on
// configuration generation gen.
func wire(state resiliencev1alpha1.State, reason string, offset time.Duration, gen int64) breakerconfig.ReportEntry {
	return breakerconfig.ReportEntry{Name: "b", State: string(state), Since: breakerconfig.NewTime(t0.Add(offset)), Reason: reason, ConfigGeneration: gen}
}

// podLine is a pod's line on its node's agent.
func podLine(name, revision string, entries ...breakerconfig.ReportEntry) PodLine {
	return PodLine{Name: name, UID: types.UID("uid-" + name), Revision: revision, Entries: entries}
}

// linesOf gives each entry a pod of its own, named prefix-i, at revision "r1".
func linesOf(prefix string, entries ...breakerconfig.ReportEntry) []PodLine {
	out := make([]PodLine, len(entries))
	for i, e := range entries {
		out[i] = podLine(fmt.Sprintf("%s-%02d", prefix, i), "r1", e)
	}
	return out
}

// onlyEntry is the one entry Node makes of lines, all of one breaker and revision.
func onlyEntry(t *testing.T, lines []PodLine) resiliencev1alpha1.NodeBreakerEntry {
	t.Helper()
	entries := Node(lines)
	if len(entries) != 1 {
		t.Fatalf("%d entries, want 1: %+v", len(entries), entries)
	}
	admitted(t, entries)
	return entries[0]
}

func TestNodeMakesOneEntryPerBreakerAndRevision(t *testing.T) {
	other := wire(closed, started, 0, 1)
	other.Name = "c"
	lines := []PodLine{
		podLine("web-a", "r2", wire(halfOpen, timedOut, 0, 1)),
		podLine("web-b", "r1", wire(open, tripped, 5*time.Second, 1), other),
		podLine("web-c", "r1", wire(closed, started, 0, 1)),
		podLine("web-d", "r2", wire(closed, adopted, 0, 1)),
		podLine("bare", "", wire(closed, started, 0, 1)),
	}
	got := Node(lines)
	admitted(t, got)
	var shape []string
	for _, e := range got {
		shape = append(shape, fmt.Sprintf("%s/%s:%d", e.Name, e.Revision, e.Pods))
	}
	if want := []string{"b/:1", "b/r1:2", "b/r2:2", "c/r1:1"}; !slices.Equal(shape, want) {
		t.Errorf("entries %v, want %v", shape, want)
	}
	if e := got[1]; e.Open != 1 || e.Closed != 1 || e.EarnedOpen != 1 {
		t.Errorf("b at r1: %+v", e)
	}
	if e := got[2]; e.HalfOpen != 1 || e.Closed != 1 || e.HoldingVerdict != 1 || e.EarnedOpen != 0 {
		t.Errorf("b at r2: %+v", e)
	}
	if got := Node(nil); len(got) != 0 {
		t.Errorf("no lines: %+v", got)
	}
}

func TestNodeCountsItsPodsByState(t *testing.T) {
	s := time.Second
	type counts struct {
		pods, closed, open, halfOpen, earnedOpen, earnedClosed, holding int32
		openSince, closedSince                                          time.Duration // -1: none
	}
	for _, tc := range []struct {
		name    string
		entries []breakerconfig.ReportEntry
		want    counts
	}{
		{"every state",
			[]breakerconfig.ReportEntry{wire(open, tripped, 5*s, 1), wire(open, adopted, 1*s, 1), wire(halfOpen, timedOut, 2*s, 1),
				wire(closed, started, 0, 1), wire(closed, succeeded, 9*s, 1), wire(closed, adopted, 10*s, 1)},
			counts{pods: 6, closed: 3, open: 2, halfOpen: 1, earnedOpen: 1, earnedClosed: 1, holding: 2, openSince: 5 * s, closedSince: 9 * s}},
		{"the earliest earned Open dates them; an earlier adopted one does not",
			[]breakerconfig.ReportEntry{wire(open, tripped, 7*s, 1), wire(open, manual, 3*s, 1), wire(open, failed, 5*s, 1), wire(open, adopted, 1*s, 1)},
			counts{pods: 4, open: 4, earnedOpen: 3, holding: 1, openSince: 3 * s, closedSince: -1}},
		{"the latest earned Closed dates them; a later adopted one does not",
			[]breakerconfig.ReportEntry{wire(closed, succeeded, 4*s, 1), wire(closed, succeeded, 9*s, 1), wire(closed, adopted, 12*s, 1)},
			counts{pods: 3, closed: 3, earnedClosed: 2, holding: 1, openSince: -1, closedSince: 9 * s}},
		{"forced, timed out and started earn nothing",
			[]breakerconfig.ReportEntry{wire(open, forced, s, 1), wire(halfOpen, timedOut, s, 1), wire(open, timedOut, s, 1), wire(closed, started, s, 1)},
			counts{pods: 4, closed: 1, open: 2, halfOpen: 1, openSince: -1, closedSince: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := onlyEntry(t, linesOf("p", tc.entries...))
			got := counts{pods: e.Pods, closed: e.Closed, open: e.Open, halfOpen: e.HalfOpen, earnedOpen: e.EarnedOpen,
				earnedClosed: e.EarnedClosed, holding: e.HoldingVerdict, openSince: -1, closedSince: -1}
			if e.OpenSince != nil {
				got.openSince = e.OpenSince.Sub(t0)
			}
			if e.ClosedSince != nil {
				got.closedSince = e.ClosedSince.Sub(t0)
			}
			if got != tc.want {
				t.Errorf("counts %+v\nwant   %+v", got, tc.want)
			}
		})
	}
}

// A node's entry dates its fleet verdict's open period by the consecutive opens of the
// Opens its pods earned (api/v1alpha1's consecutiveOpens, docs/design.md §5.13), as a
// pod's own report does by its own: a pod that only holds the fleet's earlier verdict
// starts no backed-off period.
func TestNodeConsecutiveOpensAreTheEarnedOpens(t *testing.T) {
	opened := wire(open, tripped, 5*time.Second, 1)
	opened.ConsecutiveOpens = 1
	straggler := wire(open, adopted, time.Second, 1)
	straggler.ConsecutiveOpens = 6
	probing := wire(halfOpen, timedOut, time.Second, 1)
	probing.ConsecutiveOpens = 5
	if e := onlyEntry(t, linesOf("p", opened, straggler, probing)); e.ConsecutiveOpens != 1 {
		t.Errorf("consecutiveOpens %d, want the earned Open's 1", e.ConsecutiveOpens)
	}
	again := wire(open, failed, 6*time.Second, 1)
	again.ConsecutiveOpens = 3
	if e := onlyEntry(t, linesOf("p", opened, again, straggler)); e.ConsecutiveOpens != 3 {
		t.Errorf("consecutiveOpens %d, want the most of the earned Opens, 3", e.ConsecutiveOpens)
	}
}

// configGeneration is the newest any pod runs; onLatestConfig counts the pods on it that
// refuse nothing; configErrors the pods that refuse, quoting the first by name, as status
// text.
func TestNodeConfig(t *testing.T) {
	refusing := func(gen int64, reason string) breakerconfig.ReportEntry {
		e := wire(closed, started, 0, gen)
		e.ConfigError = reason
		return e
	}
	e := onlyEntry(t, linesOf("p",
		wire(closed, started, 0, 3), wire(open, tripped, 0, 3), wire(closed, started, 0, 2),
		refusing(2, "\x1b[31mwindow:\tmust be\x00 positive\x1b[0m"), refusing(2, "second refusal"),
	))
	if e.ConfigGeneration != 3 || e.OnLatestConfig != 2 || e.ConfigErrors != 2 {
		t.Errorf("generation %d onLatestConfig %d configErrors %d, want 3, 2, 2", e.ConfigGeneration, e.OnLatestConfig, e.ConfigErrors)
	}
	if e.ConfigError != "window: must be positive" {
		t.Errorf("configError %q, want the first refusal by pod name, as status text", e.ConfigError)
	}
	long := onlyEntry(t, linesOf("p", refusing(1, strings.Repeat("é", breakerconfig.MaxConfigErrorSize))))
	if n := utf8.RuneCountInString(long.ConfigError); n != resiliencev1alpha1.MaxConfigErrorSample || !strings.HasSuffix(long.ConfigError, truncated) {
		t.Errorf("a long refusal quoted in %d characters, want %d, cut", n, resiliencev1alpha1.MaxConfigErrorSample)
	}
	if e := onlyEntry(t, linesOf("p", wire(closed, started, 0, 1))); e.ConfigErrors != 0 || e.ConfigError != "" || e.OnLatestConfig != 1 {
		t.Errorf("no refusal: %+v", e)
	}
}

// At most five pods are named, the most relevant first: open (the most recent first),
// half-open, refusing the configuration, behind it; a closed pod on the newest
// configuration is never named, and a named pod's refusal is left to the entry's sample.
func TestNodeNotable(t *testing.T) {
	s := time.Second
	refusing := wire(closed, started, 0, 2)
	refusing.ConfigError = "bad"
	lines := []PodLine{
		podLine("closed-1", "r1", wire(closed, started, 9*s, 2)),
		podLine("closed-2", "r1", wire(closed, succeeded, 8*s, 2)),
		podLine("behind", "r1", wire(closed, started, 0, 1)),
		podLine("refusing", "r1", refusing),
		podLine("probing", "r1", wire(halfOpen, timedOut, 7*s, 2)),
		podLine("open-old", "r1", wire(open, tripped, 1*s, 2)),
		podLine("open-new", "r1", wire(open, adopted, 3*s, 2)),
		podLine("open-mid", "r1", wire(open, manual, 2*s, 2)),
	}
	e := onlyEntry(t, lines)
	var names []string
	for _, p := range e.Notable {
		names = append(names, p.Name)
		if p.ConfigError != "" {
			t.Errorf("%s names its refusal %q; the entry quotes one", p.Name, p.ConfigError)
		}
		if p.UID != types.UID("uid-"+p.Name) {
			t.Errorf("%s named with UID %q", p.Name, p.UID)
		}
	}
	if want := []string{"open-new", "open-mid", "open-old", "probing", "refusing"}; !slices.Equal(names, want) {
		t.Errorf("notable %v, want %v", names, want)
	}
	if n := e.Notable[0]; n.Reason != adopted || n.State != open || !n.Since.Time.Equal(t0.Add(3*s)) || n.ConfigGeneration != 2 {
		t.Errorf("first notable %+v, want open-new's circuit", n)
	}
	// Without the open ones, the pod behind is named too.
	if e := onlyEntry(t, lines[:5]); len(e.Notable) != 3 || e.Notable[2].Name != "behind" {
		t.Errorf("notable %+v, want probing, refusing, behind", e.Notable)
	}
	if e := onlyEntry(t, lines[:2]); e.Notable != nil {
		t.Errorf("closed pods on the newest generation named: %+v", e.Notable)
	}
}

// The same lines in any order make the same entries: the agent writes only what changed,
// and equal nodes say the same.
func TestNodeIsDeterministic(t *testing.T) {
	rnd := rand.New(rand.NewPCG(41, 1))
	for run := range 200 {
		lines := randomLines(rnd, 1+rnd.IntN(40))
		want := Node(lines)
		for range 5 {
			shuffled := slices.Clone(lines)
			rnd.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
			if got := Node(shuffled); !equality.Semantic.DeepEqual(got, want) {
				t.Fatalf("run %d: another order of the lines made\n%+v\nnot\n%+v", run, got, want)
			}
		}
	}
}

// Whatever its pods report within what their agent admits (breakerconfig's bounds), a
// node's entries are what the API server admits: every bound and rule of the CRD.
func TestNodeEntriesAreAdmitted(t *testing.T) {
	rnd := rand.New(rand.NewPCG(41, 2))
	for run := range 300 {
		pods := 1 + rnd.IntN(60)
		if run%50 == 0 {
			pods = 256 // the most one object holds
		}
		lines := randomLines(rnd, pods)
		for _, l := range lines {
			for _, e := range l.Entries {
				if err := e.Validate(); err != nil {
					t.Fatalf("the test's own line is one no agent admits: %v", err)
				}
			}
		}
		entries := Node(lines)
		admitted(t, entries)
		if t.Failed() {
			t.Fatalf("run %d", run)
		}
	}
}
