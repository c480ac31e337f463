package controller

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// What one pod's report says is bounded by what the operator saw and what the spec allows
// (docs/design.md §5.12). These tests need no cluster.

func TestSpecOpenPeriod(t *testing.T) {
	d := func(x time.Duration) *metav1.Duration { return &metav1.Duration{Duration: x} }
	s, m := time.Second, time.Minute
	for _, tc := range []struct {
		name          string
		openTimeout   *metav1.Duration
		maxOpen       *metav1.Duration
		k             int32
		wantK         int32
		wantPeriod    time.Duration
		wantReachable time.Duration // the period of k = MaxInt32
	}{
		{"defaults: 30s, no backoff", nil, nil, 7, 1, 30 * s, 30 * s},
		{"no backoff: the count is 1", d(s), nil, 5, 1, s, s},
		{"a count of 0 is the first open", d(s), d(m), 0, 1, s, m},
		{"a negative count is the first open", d(s), d(m), -3, 1, s, m},
		{"the 3rd open doubles twice", d(s), d(m), 3, 3, 4 * s, m},
		{"maxOpenTimeout caps the period", d(s), d(10 * s), 5, 5, 10 * s, 10 * s},
		{"a count past the cap stops at the first k that reaches it", d(s), d(10 * s), 40, 5, 10 * s, 10 * s},
		{"a count of 2^31-1 cannot overflow", d(time.Millisecond), d(7 * 24 * time.Hour), math.MaxInt32, 31, 7 * 24 * time.Hour, 7 * 24 * time.Hour},
		{"maxOpenTimeout below openTimeout is no backoff", d(m), d(s), 3, 1, m, m},
		{"an openTimeout of 0 counts as the default", d(0), nil, 1, 1, 30 * s, 30 * s},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cb := fleetBreaker(0)
			cb.Spec.OpenTimeout, cb.Spec.MaxOpenTimeout = tc.openTimeout, tc.maxOpen
			if k, p := specOpenPeriod(cb, tc.k); k != tc.wantK || p != tc.wantPeriod {
				t.Errorf("k=%d: got k=%d %s, want k=%d %s", tc.k, k, p, tc.wantK, tc.wantPeriod)
			}
			if _, p := specOpenPeriod(cb, math.MaxInt32); p != tc.wantReachable {
				t.Errorf("longest period %s, want %s", p, tc.wantReachable)
			}
		})
	}
}

// A century-long Open from one pod: the verdict's open period is the spec's, whatever
// period and count the report that started it carries.
func TestDecideFleetTakesTheOpenPeriodFromTheSpecNotTheReport(t *testing.T) {
	cb := fleetBreaker(0)
	cb.Spec.OpenTimeout, cb.Spec.MaxOpenTimeout = &metav1.Duration{Duration: 10 * time.Second}, &metav1.Duration{Duration: time.Minute}
	for _, tc := range []struct {
		name       string
		k          int32
		period     time.Duration
		wantK      int
		wantPeriod time.Duration
	}{
		{"876000h on a first open", 1, 876000 * time.Hour, 1, 10 * time.Second},
		{"876000h on a 3rd open", 3, 876000 * time.Hour, 3, 40 * time.Second},
		{"a count of 2^31-1", math.MaxInt32, time.Minute, maxCountedOpens, time.Minute},
		{"a count past where the period stops growing is still counted", 7, time.Minute, 7, time.Minute},
		{"a shorter period than the spec's", 2, time.Millisecond, 2, 20 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := decideFleet(cb, []member{openedK("x", tripped, 5*time.Second, tc.k, tc.period), at("y", closed, started, 0)})
			v := d.verdict
			if !d.open || v == nil || v.ConsecutiveOpens != tc.wantK || time.Duration(v.OpenTimeout) != tc.wantPeriod {
				t.Fatalf("verdict %+v, want Open k=%d for %s", v, tc.wantK, tc.wantPeriod)
			}
			st := desiredStatus(outcome{breaker: cb}, aggregate(cb, []member{openedK("x", tripped, 5*time.Second, tc.k, tc.period)})).Status
			if st.OpenTimeout == nil || st.OpenTimeout.Duration != tc.wantPeriod || st.ConsecutiveOpens != int32(tc.wantK) {
				t.Errorf("status shows k=%d %v, want k=%d %s", st.ConsecutiveOpens, st.OpenTimeout, tc.wantK, tc.wantPeriod)
			}
		})
	}
	// Scope Pod obeys no verdict, but shows no longer a period than the spec's longest.
	pod := cb.DeepCopy()
	pod.Spec.Scope = resiliencev1alpha1.ScopePod
	if v := aggregate(pod, []member{openedK("x", tripped, 5*time.Second, 1, 876000*time.Hour)}); v.openTimeout.Duration != time.Minute {
		t.Errorf("Pod scope shows %s, want at most maxOpenTimeout", v.openTimeout.Duration)
	}
}

// One pod outvotes nine: an earned Closed dated before the fleet's open period could have
// ended (start + period − skew) counts for nothing.
func TestDecideFleetIgnoresAClosedNoProbeCouldHaveEarned(t *testing.T) {
	s := time.Second
	cb := fleetBreaker(50)
	cb.Spec.OpenTimeout = &metav1.Duration{Duration: 30 * s}
	nine := make([]member, 0, 10)
	for i := range 9 {
		nine = append(nine, at(string(rune('a'+i)), open, tripped, time.Duration(i)*time.Millisecond))
	}
	// The quorum (5 of 10) was complete at the 5th most recent Open: t0+4ms.
	start := t0.Add(4 * time.Millisecond)
	for _, tc := range []struct {
		name     string
		closedAt time.Duration // after start
		wantOpen bool
	}{
		{"inside the skew window after the open", 1900 * time.Millisecond, true},
		{"halfway through the open period", 15 * s, true},
		{"just before period − skew", 28*s - time.Millisecond, true},
		{"at period − skew: a pod whose clock lags by the skew", 28 * s, false},
		{"after the period", 31 * s, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			closer := member{pod: "z", since: start.Add(tc.closedAt), entry: resiliencev1alpha1.BreakerReportEntry{
				Name: "b", State: closed, Reason: succeeded, Since: metav1.NewTime(start.Add(tc.closedAt)), ConfigGeneration: 1}}
			d := decideFleet(cb, append(append([]member{}, nine...), closer))
			if d.open != tc.wantOpen {
				t.Errorf("open %v, want %v (verdict %+v)", d.open, tc.wantOpen, d.verdict)
			}
			if !tc.wantOpen && (d.verdict == nil || d.verdict.State != breakerconfig.StateClosed) {
				t.Errorf("verdict %+v, want Closed", d.verdict)
			}
		})
	}
	// The backed-off period counts: the 3rd open of a 1s openTimeout lasts 4s.
	cb.Spec.OpenTimeout, cb.Spec.MaxOpenTimeout = &metav1.Duration{Duration: s}, &metav1.Duration{Duration: time.Minute}
	opener := openedK("x", failed, 0, 3, 4*s)
	early := at("y", closed, succeeded, 1500*time.Millisecond)
	if d := decideFleet(cb, []member{opener, early}); !d.open {
		t.Error("a Closed 1.5s into a 4s open period closed the fleet")
	}
	if d := decideFleet(cb, []member{opener, at("y", closed, succeeded, 2*s)}); d.open {
		t.Error("a Closed at period − skew did not close the fleet")
	}
}

func TestAttested(t *testing.T) {
	seen := t0
	for _, tc := range []struct {
		name  string
		since time.Time
		want  time.Time
	}{
		{"before first sight: the pod's", seen.Add(-time.Hour), seen.Add(-time.Hour)},
		{"at first sight", seen, seen},
		{"within the skew", seen.Add(2 * time.Second), seen.Add(2 * time.Second)},
		{"just past the skew: first sight + skew", seen.Add(2*time.Second + time.Millisecond), seen.Add(2 * time.Second)},
		{"a century ahead: first sight + skew", seen.AddDate(100, 0, 0), seen.Add(2 * time.Second)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := attested(tc.since, seen); !got.Equal(tc.want) {
				t.Errorf("attested %s, want %s", got, tc.want)
			}
		})
	}
}

// A century-long Closed from one pod: the report's managedFields, which a client may
// write, are not the server's clock; only the operator's first sight is.
func TestObservationsAreTheOperatorsClockNotTheReports(t *testing.T) {
	century := t0.AddDate(100, 0, 0)
	report := func(uid types.UID, entries ...resiliencev1alpha1.BreakerReportEntry) *resiliencev1alpha1.BreakerReport {
		return &resiliencev1alpha1.BreakerReport{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pod-a", UID: uid, ManagedFields: []metav1.ManagedFieldsEntry{
				{Manager: "forged", Operation: metav1.ManagedFieldsOperationUpdate, Time: ptr.To(metav1.NewTime(century))},
			}},
			Breakers: entries,
		}
	}
	line := func(name string, state resiliencev1alpha1.State, reason string, since time.Time) resiliencev1alpha1.BreakerReportEntry {
		return resiliencev1alpha1.BreakerReportEntry{Name: name, State: state, Reason: reason, Since: metav1.NewTime(since)}
	}
	var o observations
	forged := report("u1", line("b", closed, succeeded, century), line("c", open, tripped, t0.Add(-time.Minute)))
	o.observe(forged, t0)
	members := membersOf(forged, o.firstSeen(forged, t0.Add(time.Minute)))
	if !members[0].since.Equal(t0.Add(maxClockSkew)) || !members[1].since.Equal(t0.Add(-time.Minute)) {
		t.Errorf("since %s and %s, want first sight + skew and the pod's own", members[0].since, members[1].since)
	}

	for _, tc := range []struct {
		name string
		rep  *resiliencev1alpha1.BreakerReport
		at   time.Time // when the watch delivers it
		want []time.Time
	}{
		{"the same entries again, counts changed: first sight stays",
			report("u1", withCalls(line("b", closed, succeeded, century)), line("c", open, tripped, t0.Add(-time.Minute))), t0.Add(time.Hour),
			[]time.Time{t0, t0}},
		{"an entry with another since is another entry",
			report("u1", line("b", closed, succeeded, century.Add(time.Second)), line("c", open, tripped, t0.Add(-time.Minute))), t0.Add(2 * time.Hour),
			[]time.Time{t0.Add(2 * time.Hour), t0}},
		{"a new pod's report under the name is seen afresh",
			report("u2", line("c", open, tripped, t0.Add(-time.Minute))), t0.Add(3 * time.Hour),
			[]time.Time{t0.Add(3 * time.Hour)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o.observe(tc.rep, tc.at)
			got := o.firstSeen(tc.rep, tc.at.Add(time.Hour))
			for i := range tc.want {
				if !got[i].Equal(tc.want[i]) {
					t.Errorf("entry %d first seen %s, want %s", i, got[i], tc.want[i])
				}
			}
		})
	}

	// A reconcile reads what the watch has not delivered yet: now, recorded by no one.
	unseen := report("u2", line("c", closed, succeeded, century))
	if got := o.firstSeen(unseen, t0.Add(5*time.Hour)); !got[0].Equal(t0.Add(5 * time.Hour)) {
		t.Errorf("undelivered entry first seen %s, want now", got[0])
	}
	if got := o.firstSeen(report("u2", line("c", open, tripped, t0.Add(-time.Minute))), t0.Add(6*time.Hour)); !got[0].Equal(t0.Add(3 * time.Hour)) {
		t.Errorf("firstSeen recorded what it read: %s", got[0])
	}
	// A restarted operator has seen nothing: first sight is now.
	var restarted observations
	if got := restarted.firstSeen(forged, t0.Add(7*time.Hour)); !got[0].Equal(t0.Add(7 * time.Hour)) {
		t.Errorf("after a restart first seen %s, want now", got[0])
	}
	o.forget(types.NamespacedName{Namespace: "ns", Name: "pod-a"})
	if o.len() != 0 {
		t.Errorf("%d reports remembered after the delete", o.len())
	}
}

func withCalls(e resiliencev1alpha1.BreakerReportEntry) resiliencev1alpha1.BreakerReportEntry {
	e.Calls, e.FailureRatePercent = ptr.To[int64](40), ptr.To[int32](60)
	return e
}

// A frozen status: sums of what the reports say stay inside int32 and at or above 0, so
// the status schema never refuses the write.
func TestAggregateKeysCannotOverflow(t *testing.T) {
	group := func(pod string, keys, open, halfOpen int32) member {
		m := at(pod, closed, started, 0)
		m.entry.Keys = &resiliencev1alpha1.KeySummary{Keys: keys, Open: open, HalfOpen: halfOpen}
		return m
	}
	for _, tc := range []struct {
		name                     string
		members                  []member
		wantKeys, wantOpen, want int32
	}{
		{"2^31-1 counts", []member{group("a", math.MaxInt32, math.MaxInt32, 1), group("b", math.MaxInt32, 1, math.MaxInt32)}, breakerconfig.MaxKeyCount, breakerconfig.MaxKeyCount + 1, breakerconfig.MaxKeyCount - 1},
		{"open and halfOpen beyond the pod's keys count as its keys", []member{group("a", 5, math.MaxInt32, 1), group("b", 5, 1, math.MaxInt32)}, 5, 6, 4},
		{"negative counts count as 0", []member{group("a", -4, -7, -1), group("b", 2, 3, 1)}, 2, 2, 0},
		{"ordinary sums", []member{group("a", 10, 2, 1), group("b", 12, 3, 0)}, 12, 5, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := aggregateKeys(tc.members)
			if k == nil || k.Keys != tc.wantKeys || k.Open != tc.wantOpen || k.HalfOpen != tc.want {
				t.Errorf("keys %+v, want keys %d open %d halfOpen %d", k, tc.wantKeys, tc.wantOpen, tc.want)
			}
		})
	}
	// 5,000 pods at the bound, every key open: the sum fits int32.
	many := make([]member, 5000)
	for i := range many {
		many[i] = group("p", breakerconfig.MaxKeyCount, breakerconfig.MaxKeyCount, 0)
	}
	if k := aggregateKeys(many); k.Open != 5000*breakerconfig.MaxKeyCount || k.Keys != breakerconfig.MaxKeyCount {
		t.Errorf("5,000 pods at the bound: %+v", k)
	}
}

// One pod, one share (issue 29): a pod's Group counts at most maxShareOfMedian times the
// median pod's keys (at least minKeysBound), and names each worst key once.
func TestAggregateKeysCountsABoundedShare(t *testing.T) {
	group := func(pod string, keys, open int32, worst ...string) member {
		m := at(pod, closed, started, 0)
		m.entry.Keys = &resiliencev1alpha1.KeySummary{Keys: keys, Open: open, Worst: worst}
		return m
	}
	var fleet []member
	for i := range 9 {
		fleet = append(fleet, group(string(rune('a'+i)), 100, 10, "h1", "h2"))
	}
	fleet = append(fleet, group("rogue", breakerconfig.MaxKeyCount, breakerconfig.MaxKeyCount/2, "evil", "evil", "evil", "evil", "evil"))
	k := aggregateKeys(fleet)
	bound := int32(maxShareOfMedian * minKeysBound)
	want := resiliencev1alpha1.KeySummary{Keys: bound, Open: 9*10 + bound/2, Worst: []string{"h1", "h2", "evil"}}
	if !equality.Semantic.DeepEqual(*k, want) {
		t.Errorf("keys %+v, want %+v", *k, want)
	}
	// A fleet of large Groups is not scaled down by the bound's floor.
	big := []member{group("a", 300_000, 0), group("b", 200_000, 0), group("c", 250_000, 0)}
	if k := aggregateKeys(big); k.Keys != 300_000 {
		t.Errorf("large Groups: %+v", k)
	}
}

// One pod's keys:{} cannot switch a breaker between the fleet rule and a Group's
// aggregation: the shape most pods report is kept, the odd pods left out and named.
func TestOddShapes(t *testing.T) {
	plain := func(pod string) member { return at(pod, open, tripped, time.Second) }
	group := func(pod string) member {
		m := at(pod, closed, started, 0)
		m.entry.Keys = &resiliencev1alpha1.KeySummary{}
		return m
	}
	pods := func(ms []member) []string {
		var out []string
		for _, m := range ms {
			out = append(out, m.pod)
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
			kept, odd := oddShapes(tc.members)
			if strings.Join(pods(kept), ",") != strings.Join(tc.wantKept, ",") || strings.Join(odd, ",") != strings.Join(tc.wantOdd, ",") {
				t.Errorf("kept %v odd %v, want %v and %v", pods(kept), odd, tc.wantKept, tc.wantOdd)
			}
		})
	}

	// The fleet rule still applies, and ConfigApplied says who was left out.
	cb := fleetBreaker(0)
	kept, odd := oddShapes([]member{plain("a"), group("z"), at("b", closed, started, 0)})
	v := aggregate(cb, kept)
	v.oddShape = odd
	if v.fleet == nil || !v.fleet.open || v.keys != nil {
		t.Errorf("fleet %+v keys %+v: want the fleet rule, open on a's Open", v.fleet, v.keys)
	}
	st := desiredStatus(outcome{breaker: cb}, v)
	c := meta.FindStatusCondition(st.Status.Conditions, resiliencev1alpha1.ConditionConfigApplied)
	want := "1 pods report this breaker as a breaker Group (keys) while 2 report it as a plain breaker; one breaker has one shape, so theirs are left out: z"
	if c == nil || c.Reason != ReasonReportShapesMixed || c.Status != metav1.ConditionFalse || c.Message != want {
		t.Errorf("ConfigApplied %+v\nwant %s %q", c, ReasonReportShapesMixed, want)
	}
}

// What CEL cannot check: an until beyond the 7-day bound counts as 7 days after the
// operator first saw the override, and the Overridden condition says so.
func TestOverrideAtBoundsTheUntil(t *testing.T) {
	week := resiliencev1alpha1.MaxOverrideDuration
	for _, tc := range []struct {
		name        string
		until       time.Time
		now         time.Time
		wantUntil   time.Time
		wantBounded bool
		wantInForce bool
	}{
		{"within the bound", t0.Add(time.Hour), t0, t0.Add(time.Hour), false, true},
		{"at the bound", t0.Add(week), t0, t0.Add(week), false, true},
		{"8 days ahead", t0.Add(8 * 24 * time.Hour), t0, t0.Add(week), true, true},
		{"year 9999", time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), t0, t0.Add(week), true, true},
		{"year 9999, a week later", time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), t0.Add(week), t0.Add(week), true, false},
		{"in the past", t0.Add(-time.Hour), t0, t0.Add(-time.Hour), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cb := overridden(tc.until, "alice")
			s := overrideAt(cb, tc.now, t0)
			if !s.until.Equal(tc.wantUntil) || s.bounded != tc.wantBounded || s.inForce() != tc.wantInForce {
				t.Errorf("until %s bounded %v in force %v; want %s %v %v", s.until, s.bounded, s.inForce(), tc.wantUntil, tc.wantBounded, tc.wantInForce)
			}
			setOverriddenCondition(cb, s)
			c := meta.FindStatusCondition(cb.Status.Conditions, resiliencev1alpha1.ConditionOverridden)
			if says := strings.Contains(c.Message, "is more than 7 days after the operator first saw the override"); says != tc.wantBounded {
				t.Errorf("message %q: says it is bounded %v, want %v", c.Message, says, tc.wantBounded)
			}
			if tc.wantBounded && !strings.Contains(c.Message, tc.wantUntil.UTC().Format(time.RFC3339)) {
				t.Errorf("message %q does not name the bound", c.Message)
			}
		})
	}
}

// Writes of one breaker's status are at least minWriteInterval apart, counts alone
// minCountsInterval; the first after a quiet interval goes at once; the state changes a
// write coalesced are counted.
func TestStatusWritesAreSpaced(t *testing.T) {
	var r CircuitBreakerReconciler
	key := types.NamespacedName{Namespace: "ns", Name: "b"}
	counts := func(n int32) *resiliencev1alpha1.MemberCounts { return &resiliencev1alpha1.MemberCounts{Reporting: n} }
	stored := &resiliencev1alpha1.CircuitBreaker{Status: resiliencev1alpha1.CircuitBreakerStatus{State: closed, MemberCounts: counts(1)}}
	opened := stored.DeepCopy()
	opened.Status.State = open
	more := stored.DeepCopy()
	more.Status.MemberCounts = counts(2)

	if w := r.writeWait(key, stored, opened); w != 0 {
		t.Errorf("first write waits %s", w)
	}
	r.sawState(key, closed, open)
	if n := r.wrote(key, open); n != 0 {
		t.Errorf("a single change coalesced %d others", n)
	}
	if w := r.writeWait(key, stored, opened); w <= 0 || w > minWriteInterval {
		t.Errorf("a state change right after a write waits %s, want up to %s", w, minWriteInterval)
	}
	if w := r.writeWait(key, stored, more); w <= minWriteInterval || w > minCountsInterval {
		t.Errorf("a counts change right after a write waits %s, want up to %s", w, minCountsInterval)
	}
	// Open → Closed → Open → HalfOpen seen before the next write: it stands for 2 more.
	for _, s := range []resiliencev1alpha1.State{closed, open, halfOpen} {
		r.sawState(key, open, s)
	}
	if n := r.wrote(key, halfOpen); n != 2 {
		t.Errorf("coalesced %d state changes, want 2", n)
	}
	r.forgetWrites("ns", nil)
	if w := r.writeWait(key, stored, opened); w != 0 {
		t.Errorf("a deleted breaker's record was kept: waits %s", w)
	}
}

// A breaker Group is one line per pod; the status adds the lines up.
func TestAggregateKeys(t *testing.T) {
	group := func(pod string, keys, open, halfOpen int32, worst ...string) member {
		m := at(pod, closed, started, 0)
		m.entry.Keys = &resiliencev1alpha1.KeySummary{Keys: keys, Open: open, HalfOpen: halfOpen, Worst: worst}
		return m
	}
	cb := &resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "b", Generation: 1}}
	if v := aggregate(cb, closedPods("p", 3)); v.keys != nil {
		t.Errorf("no Group: keys %+v, want none", v.keys)
	}
	members := []member{
		group("a", 40, 3, 1, "h1", "h2", "h3", "h9"),
		group("b", 55, 2, 0, "h2", "h3"),
		group("c", 12, 0, 0),
		group("d", 30, 4, 2, "h3", "h4", "h5", "h6", "h7"),
		at("e", closed, started, 0), // a pod whose agent predates Groups
	}
	v := aggregate(cb, members)
	want := resiliencev1alpha1.KeySummary{Keys: 55, Open: 9, HalfOpen: 3, Worst: []string{"h3", "h2", "h1", "h4", "h5"}}
	if v.keys == nil || !equality.Semantic.DeepEqual(*v.keys, want) {
		t.Errorf("keys %+v, want %+v", v.keys, want)
	}
	if v.listed[0].Keys == nil || v.listed[0].Keys == members[0].entry.Keys {
		t.Errorf("member keys %+v, want a copy of the pod's", v.listed[0].Keys)
	}
	if v := aggregate(cb, []member{group("a", 3, 0, 0)}); v.keys == nil || v.keys.Keys != 3 || v.keys.Worst != nil {
		t.Errorf("a quiet Group: %+v", v.keys)
	}
	// Status round trip: what the API server stores is what is computed again.
	desired := desiredStatus(outcome{breaker: cb}, aggregate(cb, members))
	raw, err := json.Marshal(desired)
	if err != nil {
		t.Fatal(err)
	}
	var stored resiliencev1alpha1.CircuitBreaker
	if err := json.Unmarshal(raw, &stored); err != nil {
		t.Fatal(err)
	}
	if again := desiredStatus(outcome{breaker: &stored}, aggregate(&stored, members)); !equality.Semantic.DeepEqual(stored.Status, again.Status) {
		t.Errorf("stored status differs from the one computed again:\nstored %+v\nagain  %+v", stored.Status, again.Status)
	}
}
