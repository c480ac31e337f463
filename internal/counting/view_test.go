package counting

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// What a breaker's entries add up to in its status (Aggregate).

func TestAggregate(t *testing.T) {
	cb := podBreaker(2)
	if v := Aggregate(cb, nil); v.State != "" || v.Counts != nil || v.Members != nil {
		t.Errorf("no members: %+v", v)
	}
	latest := func(m member) member { m.entry.ConfigGeneration = 2; return m }
	behind := at("d", closed, started, 0)
	rejected := latest(at("e", closed, started, 0))
	rejected.entry.ConfigError = "window: must be positive"
	members := []member{latest(at("a", closed, started, 0)), latest(at("b", halfOpen, timedOut, 0)), latest(at("c", open, tripped, 0)), behind, rejected}
	v := Aggregate(cb, entriesOf(members...))
	if v.State != open {
		t.Errorf("Pod scope: state %s, want the most severe, Open", v.State)
	}
	want := resiliencev1alpha1.MemberCounts{Reporting: 5, Closed: 3, Open: 1, HalfOpen: 1, OnLatestConfig: 3}
	if *v.Counts != want {
		t.Errorf("counts %+v, want %+v", *v.Counts, want)
	}
	if len(v.Rejected) != 1 || v.Rejected[0] != "e: window: must be positive" {
		t.Errorf("rejected %q", v.Rejected)
	}
	if v.opener == nil || v.opener.Pod != "c" || v.Fleet != nil {
		t.Errorf("opener %+v fleet %+v", v.opener, v.Fleet)
	}

	for _, tc := range []struct {
		name    string
		quorum  int32
		members []member
		want    resiliencev1alpha1.State
	}{
		{"Fleet: open when the fleet is", 0, []member{at("a", closed, started, 0), at("b", open, tripped, 5*time.Second)}, open},
		{"Fleet: an Open below the quorum is HalfOpen", 50, []member{at("a", closed, started, 0), at("b", closed, started, 0), at("c", open, tripped, 5*time.Second)}, halfOpen},
		{"Fleet: only adopted Opens is HalfOpen", 0, []member{at("a", open, adopted, 0)}, halfOpen},
		{"Fleet: a probing pod is HalfOpen", 0, []member{at("a", closed, started, 0), at("b", halfOpen, timedOut, 0)}, halfOpen},
		{"Fleet: closed once every pod is", 0, []member{at("a", closed, adopted, 9*time.Second), at("b", closed, succeeded, 9*time.Second)}, closed},
		{"Fleet: closed by probes while a pod is still open is HalfOpen", 0, []member{at("a", open, tripped, 0), at("b", closed, succeeded, 9*time.Second)}, halfOpen},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if v := Aggregate(fleetBreaker(tc.quorum), entriesOf(tc.members...)); v.State != tc.want || v.Fleet == nil {
				t.Errorf("state %s (fleet %+v), want %s", v.State, v.Fleet, tc.want)
			}
		})
	}
	// A Fleet breaker held open by its mode is open, and says it is forced.
	forcedOpen := fleetBreaker(0)
	forcedOpen.Spec.Mode = resiliencev1alpha1.ModeForcedOpen
	if v := Aggregate(forcedOpen, entriesOf(at("a", open, forced, 0), at("b", open, forced, 0))); v.State != open || !v.Forced {
		t.Errorf("ForcedOpen: state %s forced %v, want Open, forced", v.State, v.Forced)
	}
}

func TestListedMostRelevantFirstAndAtMost20(t *testing.T) {
	cb := podBreaker(2)
	latest := func(m member) member { m.entry.ConfigGeneration = 2; return m }
	var members []member
	for i := range 30 { // closed, on the latest config: the least relevant
		members = append(members, latest(at(fmt.Sprintf("closed-%02d", i), closed, started, 0)))
	}
	behind := at("behind", closed, started, 0)
	refusing := latest(at("refusing", closed, started, 0))
	refusing.entry.ConfigError = "bad"
	members = append(members,
		behind, refusing,
		latest(at("probing", halfOpen, timedOut, 3*time.Second)),
		latest(at("open-old", open, tripped, 1*time.Second)),
		latest(at("open-new", open, tripped, 2*time.Second)),
		latest(at("open-new-too", open, manual, 2*time.Second)),
	)
	v := Aggregate(cb, entriesOf(members...))
	if v.Counts.Reporting != 36 {
		t.Errorf("reporting %d, want every member counted", v.Counts.Reporting)
	}
	if len(v.Members) != resiliencev1alpha1.MaxMembersListed {
		t.Fatalf("listed %d, want %d", len(v.Members), resiliencev1alpha1.MaxMembersListed)
	}
	var got []string
	for _, m := range v.Members {
		got = append(got, m.Pod)
	}
	want := []string{"open-new", "open-new-too", "open-old", "probing", "refusing", "behind"}
	for i := range 14 {
		want = append(want, fmt.Sprintf("closed-%02d", i))
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("listed\n%v\nwant\n%v", got, want)
	}
	if l := v.Members[0]; l.Reason != tripped || l.State != open || l.ConfigGeneration != 2 {
		t.Errorf("first listed %+v", l)
	}
}

// A status the API server stored and returned is the status the next reconcile computes
// from the same reports, or the controller would patch it on every reconcile. Reports
// carry milliseconds; status.members times and the candidate's start are whole seconds.
func TestStatusFiguresSurviveTheRoundTrip(t *testing.T) {
	cb := fleetBreaker(0)
	cb.Spec.Candidate = &resiliencev1alpha1.CandidatePolicy{FailureRatePercent: ptr.To[int32](10)}
	a, b := at("a", open, tripped, 1500*time.Millisecond), at("b", closed, started, 250*time.Millisecond)
	start := metav1.NewTime(t0.Add(1234 * time.Millisecond))
	b.entry.Candidate = &resiliencev1alpha1.CandidateReport{State: closed, StartTime: &start, TimeOpen: &metav1.Duration{Duration: 1500 * time.Microsecond}}
	v := Aggregate(cb, entriesOf(a, b))
	computed := resiliencev1alpha1.CircuitBreakerStatus{Members: v.Members, Candidate: v.Candidate, Keys: v.Keys, Revisions: v.Revisions}
	raw, err := json.Marshal(computed)
	if err != nil {
		t.Fatal(err)
	}
	var stored resiliencev1alpha1.CircuitBreakerStatus
	if err := json.Unmarshal(raw, &stored); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(stored, computed) {
		t.Errorf("stored status differs from the one computed:\nstored   %+v\ncomputed %+v", stored, computed)
	}
}

// Pods that open in the same millisecond are named in the same way whatever order the
// cache lists them in; otherwise each reconcile could write a different Open message.
func TestTheOpenerDoesNotDependOnTheOrderOfReports(t *testing.T) {
	cb := podBreaker(1)
	members := []member{at("c", open, tripped, time.Second), at("a", open, tripped, time.Second), at("b", open, tripped, time.Second), at("d", closed, started, 0)}
	want := Aggregate(cb, entriesOf(members...)).OpenedMessage(cb)
	rnd := rand.New(rand.NewPCG(3, 4))
	for range 20 {
		shuffled := slices.Clone(members)
		rnd.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if got := Aggregate(cb, entriesOf(shuffled...)).OpenedMessage(cb); got != want {
			t.Fatalf("order %v: %q, want %q", shuffled, got, want)
		}
	}
	if !strings.HasPrefix(want, "Pod a opened") {
		t.Errorf("%q, want the first pod by name among equals", want)
	}
}

// The open period on the aggregate: a Fleet breaker shows its verdict's, a Pod one the
// longest any pod reports; members carry their own lines whole.
func TestAggregateOpenPeriodAndMemberFields(t *testing.T) {
	period := func(k int32, d time.Duration, m member) member {
		m.entry.ConsecutiveOpens, m.entry.OpenTimeout = k, &metav1.Duration{Duration: d}
		return m
	}
	slow := period(3, 4*time.Second, at("a", open, failed, 5*time.Second))
	slow.entry.Trigger, slow.entry.SlowCallRatePercent, slow.entry.Calls = breakerconfig.TriggerSlowCallRate, ptr.To[int32](90), ptr.To[int64](10)
	members := []member{slow, period(2, 2*time.Second, at("b", halfOpen, timedOut, 4*time.Second)), at("c", closed, started, 0)}

	podScope := podBreaker(1)
	v := Aggregate(podScope, entriesOf(members...))
	if v.ConsecutiveOpens != 3 || v.OpenTimeout == nil || v.OpenTimeout.Duration != 4*time.Second {
		t.Errorf("Pod scope: %d %v, want the most any pod reports, 3 and 4s", v.ConsecutiveOpens, v.OpenTimeout)
	}
	l := v.Members[0]
	if l.Pod != "a" || l.Trigger != "SlowCallRate" || l.SlowCallRatePercent == nil || *l.SlowCallRatePercent != 90 ||
		l.ConsecutiveOpens != 3 || l.OpenTimeout == nil || l.OpenTimeout.Duration != 4*time.Second {
		t.Errorf("listed member %+v, want a's whole line", l)
	}
	if l.OpenTimeout == members[0].entry.OpenTimeout || l.SlowCallRatePercent == members[0].entry.SlowCallRatePercent {
		t.Error("status.members shares pointers with the reports, which are the cache's")
	}

	// The fleet opened on b's earlier failed probe (k=2) and a's later one (k=3): the
	// verdict, and so the status, is a's.
	fleetMembers := []member{members[0], period(2, 2*time.Second, at("b", open, failed, 1*time.Second)), at("c", open, adopted, 5*time.Second)}
	backoff := fleetBreaker(0)
	backoff.Spec.MaxOpenTimeout = &metav1.Duration{Duration: time.Minute}
	v = Aggregate(backoff, entriesOf(fleetMembers...))
	if v.State != open || v.ConsecutiveOpens != 3 || v.OpenTimeout == nil || v.OpenTimeout.Duration != 4*time.Second {
		t.Errorf("Fleet: %s %d %v, want Open, the verdict's 3 and 4s", v.State, v.ConsecutiveOpens, v.OpenTimeout)
	}
	// Closed by probes: no open period, whatever a straggler still reports.
	v = Aggregate(fleetBreaker(0), entriesOf(members[0], at("b", closed, succeeded, 9*time.Second)))
	if v.ConsecutiveOpens != 0 || v.OpenTimeout != nil {
		t.Errorf("Fleet closed by probes: %d %v, want none", v.ConsecutiveOpens, v.OpenTimeout)
	}
}

// One pod's keys:{} cannot switch a breaker between the fleet rule and a Group's
// aggregation: the shape most pods report is kept, the odd carriers left out and named.
func TestOddShapes(t *testing.T) {
	plain := func(pod string) member { return at(pod, open, tripped, time.Second) }
	group := func(pod string) member {
		m := at(pod, closed, started, 0)
		m.entry.Keys = &resiliencev1alpha1.KeySummary{}
		return m
	}
	pods := func(es []Entry) []string {
		var out []string
		for _, e := range es {
			out = append(out, e.Pod)
		}
		return out
	}
	for _, tc := range []struct {
		name     string
		members  []member
		wantKept []string
		wantOdd  []string
	}{
		{"all plain", []member{plain("a"), plain("b")}, []string{"a", "b"}, nil},
		{"all Groups", []member{group("a"), group("b")}, []string{"a", "b"}, nil},
		{"one Group among plain ones", []member{plain("a"), group("z"), plain("b")}, []string{"a", "b"}, []string{"z"}},
		{"one plain among Groups", []member{group("a"), plain("z"), group("b")}, []string{"a", "b"}, []string{"z"}},
		{"a tie keeps plain", []member{group("a"), plain("b")}, []string{"b"}, []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kept, odd := OddShapes(entriesOf(tc.members...))
			if strings.Join(pods(kept), ",") != strings.Join(tc.wantKept, ",") || strings.Join(odd, ",") != strings.Join(tc.wantOdd, ",") {
				t.Errorf("kept %v odd %v, want %v and %v", pods(kept), odd, tc.wantKept, tc.wantOdd)
			}
		})
	}

	// The fleet rule still applies, and the message says who was left out.
	cb := fleetBreaker(0)
	kept, odd := OddShapes(entriesOf(plain("a"), group("z"), at("b", closed, started, 0)))
	v := Aggregate(cb, kept)
	v.OddShape = odd
	if v.Fleet == nil || !v.Fleet.Open || v.Keys != nil {
		t.Errorf("fleet %+v keys %+v: want the fleet rule, open on a's Open", v.Fleet, v.Keys)
	}
	want := "1 carriers report this breaker as a breaker Group (keys) while 2 pods report it as a plain breaker; one breaker has one shape, so theirs are left out: z"
	if got := v.OddShapeMessage(); got != want {
		t.Errorf("message %q\nwant    %q", got, want)
	}
}
