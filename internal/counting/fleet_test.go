package counting

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// The fleet rule (docs/design.md §5.12) over pods that each report on their own.

func TestDecideFleet(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		name      string
		quorum    int32
		members   []member
		wantOpen  bool
		wantState string // the published verdict, "" for none
		wantSince time.Duration
		wantNeed  int64
	}{
		{"no members", 0, nil, false, "", 0, 1},
		{"every pod just started", 0, closedPods("p", 3), false, "", 0, 1},
		{"one pod's calls open the fleet", 0,
			append(closedPods("p", 2), at("x", open, tripped, 5*s)), true, "Open", 5 * s, 1},
		{"Trip opens it", 0, []member{at("x", open, manual, 5*s)}, true, "Open", 5 * s, 1},
		{"a failed probe opens it", 0, []member{at("x", open, failed, 5*s)}, true, "Open", 5 * s, 1},
		{"an adopted Open moves nothing", 0, []member{at("x", open, adopted, 5*s)}, false, "", 0, 1},
		{"a forced Open moves nothing", 0, []member{at("x", open, forced, 5*s)}, false, "", 0, 1},
		{"a timeout moves nothing", 0, []member{at("x", halfOpen, timedOut, 5*s), at("y", open, timedOut, 6*s)}, false, "", 0, 1},
		{"a fresh pod's Closed does not close an open fleet", 0,
			[]member{at("x", open, tripped, 5*s), at("new", closed, started, 9*s)}, true, "Open", 5 * s, 1},
		{"an adopted Closed does not close it", 0,
			[]member{at("x", open, tripped, 5*s), at("y", closed, adopted, 9*s)}, true, "Open", 5 * s, 1},
		{"probes that succeed after the open close it", 0,
			[]member{at("x", open, tripped, 5*s), at("y", closed, succeeded, 9*s)}, false, "Closed", 9 * s, 1},
		{"probes that succeeded before the open do not", 0,
			[]member{at("x", open, tripped, 5*s), at("y", closed, succeeded, 4*s)}, true, "Open", 5 * s, 1},
		{"a tie goes to open", 0,
			[]member{at("x", open, tripped, 5*s), at("y", closed, succeeded, 5*s)}, true, "Open", 5 * s, 1},
		{"the Closed verdict is withdrawn once every pod is closed", 0,
			[]member{at("x", closed, adopted, 9*s), at("y", closed, succeeded, 9*s)}, false, "", 0, 1},
		{"an Open from before the breaker existed counts for nothing", 0,
			[]member{at("x", open, tripped, -2*time.Hour)}, false, "", 0, 1},
		{"quorum 30% of 10: two opens are not enough", 30,
			append(closedPods("p", 8), at("x", open, tripped, 5*s), at("y", open, tripped, 6*s)), false, "", 0, 3},
		{"quorum 30% of 10: the third opens it, since the third most recent", 30,
			append(closedPods("p", 7), at("x", open, tripped, 5*s), at("y", open, tripped, 6*s), at("z", open, manual, 7*s)), true, "Open", 5 * s, 3},
		{"quorum 30% of 10: with four, the quorum was complete at the second", 30,
			append(closedPods("p", 6), at("w", open, tripped, 1*s), at("x", open, tripped, 5*s), at("y", open, tripped, 6*s), at("z", open, manual, 7*s)), true, "Open", 5 * s, 3},
		{"quorum 30% of 10: adopted opens do not count toward it", 30,
			append(closedPods("p", 6), at("w", open, adopted, 1*s), at("x", open, adopted, 5*s), at("y", open, tripped, 6*s), at("z", open, manual, 7*s)), false, "", 0, 3},
		{"quorum 100% of 3: two are not enough", 100,
			append(closedPods("p", 1), at("x", open, tripped, 5*s), at("y", open, tripped, 6*s)), false, "", 0, 3},
		{"quorum 100% of 3: all three open it", 100,
			[]member{at("w", open, tripped, 2*s), at("x", open, tripped, 5*s), at("y", open, tripped, 6*s)}, true, "Open", 2 * s, 3},
		{"quorum 1% of one pod still needs that pod", 1, []member{at("x", open, tripped, 5*s)}, true, "Open", 5 * s, 1},
		{"quorum 30% with no pods needs one", 30, nil, false, "", 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := DecideFleet(fleetBreaker(tc.quorum), entriesOf(tc.members...))
			if d.Open != tc.wantOpen || d.Need != tc.wantNeed {
				t.Errorf("open %v need %d, want open %v need %d", d.Open, d.Need, tc.wantOpen, tc.wantNeed)
			}
			switch v := d.Verdict; {
			case tc.wantState == "" && v != nil:
				t.Errorf("verdict %+v, want none", *v)
			case tc.wantState != "" && v == nil:
				t.Errorf("no verdict, want %s", tc.wantState)
			case v != nil && (v.State != tc.wantState || !v.Since.Equal(t0.Add(tc.wantSince))):
				t.Errorf("verdict %s since %s, want %s since %s", v.State, v.Since, tc.wantState, t0.Add(tc.wantSince))
			}
		})
	}
}

// A breaker deleted and created again under its name refuses the old breaker's Open, even
// though the report still names it.
func TestDecideFleetIgnoresOpensFromBeforeTheBreakerWasCreated(t *testing.T) {
	cb := fleetBreaker(0)
	cb.CreationTimestamp = metav1.NewTime(t0.Add(10 * time.Second))
	old := []member{at("x", open, tripped, 5*time.Second), at("y", closed, succeeded, 8*time.Second)}
	if d := DecideFleet(cb, entriesOf(old...)); d.Open || d.Verdict != nil || len(d.openers) != 0 {
		t.Errorf("decision %+v, want nothing from before the breaker existed", d)
	}
	if d := DecideFleet(cb, entriesOf(append(old, at("z", open, tripped, 10*time.Second))...)); !d.Open {
		t.Error("an Open at the creation second must count")
	}
}

// backedOff is docs/design.md §5.13's k-th open period.
func backedOff(k int, openTimeout, maxOpenTimeout time.Duration) time.Duration {
	d := openTimeout
	for range k - 1 {
		d *= 2
		if d >= maxOpenTimeout {
			return maxOpenTimeout
		}
	}
	return min(d, maxOpenTimeout)
}

// A fleet that keeps failing its probes backs off as one (docs/design.md §5.13): the k-th
// consecutive fleet open carries min(openTimeout×2^(k-1), maxOpenTimeout), taken from the
// pod whose failed probe started it, whichever pod that is, while the pods that only
// adopted the verdicts before report nothing that moves it.
func TestDecideFleetBacksOffAcrossTheFleet(t *testing.T) {
	const openTimeout, maxOpenTimeout = time.Second, 10 * time.Second
	backoffBreaker := fleetBreaker(0)
	backoffBreaker.Spec.MaxOpenTimeout = &metav1.Duration{Duration: maxOpenTimeout}
	pods := []string{"a", "b", "c", "d"}
	var history []member // each pod's latest line
	for i, p := range pods {
		history = append(history, at(p, closed, started, time.Duration(i)*time.Millisecond))
	}
	offset := time.Second
	for k := 1; k <= 7; k++ {
		want := backedOff(k, openTimeout, maxOpenTimeout)
		reason := failed
		if k == 1 {
			reason = tripped
		}
		// Pod k mod 4 earns the open; every other pod adopted the previous verdict and then
		// timed out into half-open, none of which moves the fleet.
		opener := k % len(pods)
		for i, p := range pods {
			if i == opener {
				history[i] = openedK(p, reason, offset, int32(k), want)
				continue
			}
			m := at(p, halfOpen, timedOut, offset-time.Millisecond)
			m.entry.ConsecutiveOpens, m.entry.OpenTimeout = int32(k-1), &metav1.Duration{Duration: backedOff(max(k-1, 1), openTimeout, maxOpenTimeout)}
			history[i] = m
		}
		d := DecideFleet(backoffBreaker, entriesOf(history...))
		v := d.Verdict
		if !d.Open || v == nil || v.State != breakerconfig.StateOpen || !v.Since.Equal(t0.Add(offset)) {
			t.Fatalf("open %d: decision open=%v verdict %+v, want Open since t0+%s", k, d.Open, v, offset)
		}
		if v.ConsecutiveOpens != k || time.Duration(v.OpenTimeout) != want {
			t.Errorf("open %d: verdict carries k=%d period %s, want k=%d period %s", k, v.ConsecutiveOpens, time.Duration(v.OpenTimeout), k, want)
		}
		offset += want + 100*time.Millisecond
	}
	if got := backedOff(3, openTimeout, maxOpenTimeout); got != 4*time.Second {
		t.Errorf("the test's own §5.13: third period %s, want 4s", got)
	}
}

// With a quorum, the open period is the one of the Open that completed the quorum: the
// fleet's open period starts there, so its length is that report's too.
func TestDecideFleetOpenPeriodFromTheOpenThatStartedIt(t *testing.T) {
	s := time.Second
	opens := []member{
		openedK("w", tripped, 1*s, 1, 30*s),
		openedK("x", failed, 5*s, 2, 60*s),
		openedK("y", tripped, 6*s, 1, 30*s),
	}
	members := append(closedPods("p", 7), opens...)
	cb := fleetBreaker(30)
	cb.Spec.OpenTimeout, cb.Spec.MaxOpenTimeout = &metav1.Duration{Duration: 30 * s}, &metav1.Duration{Duration: 2 * time.Minute}
	d := DecideFleet(cb, entriesOf(members...))
	if v := d.Verdict; !d.Open || !v.Since.Equal(t0.Add(1*s)) || v.ConsecutiveOpens != 1 || time.Duration(v.OpenTimeout) != 30*s {
		t.Errorf("verdict %+v, want w's: since t0+1s, k=1, 30s", v)
	}
	// A closed pod earns the fourth Open of ten: the quorum of 3 was complete at x's.
	members = append(append(closedPods("p", 6), opens...), openedK("z", failed, 7*s, 3, 2*time.Minute))
	d = DecideFleet(cb, entriesOf(members...))
	if v := d.Verdict; !d.Open || !v.Since.Equal(t0.Add(5*s)) || v.ConsecutiveOpens != 2 || time.Duration(v.OpenTimeout) != 60*s {
		t.Errorf("verdict %+v, want x's: since t0+5s, k=2, 1m", v)
	}
}

// Reports without an open period (an agent from before backoff) give a verdict without
// one, and the pods keep their own policy's; a Closed verdict never carries one.
func TestDecideFleetWithoutOpenPeriods(t *testing.T) {
	d := DecideFleet(fleetBreaker(0), entriesOf(at("x", open, tripped, 5*time.Second)))
	if v := d.Verdict; v == nil || v.ConsecutiveOpens != 0 || v.OpenTimeout != 0 {
		t.Errorf("verdict %+v, want Open with no period", v)
	}
	d = DecideFleet(fleetBreaker(0), entriesOf(openedK("x", tripped, 5*time.Second, 2, 2*time.Second), at("y", closed, succeeded, 9*time.Second)))
	if v := d.Verdict; v == nil || v.State != breakerconfig.StateClosed || v.ConsecutiveOpens != 0 || v.OpenTimeout != 0 {
		t.Errorf("verdict %+v, want Closed with no period", v)
	}
}

// A breaker Group's entry moves no fleet verdict: no key's verdict is shared across the
// fleet (docs/groups.md). Its state is its pods', as with scope Pod, not the half-open a
// fleet with an unshared Open would show.
func TestAGroupMovesNoFleetVerdict(t *testing.T) {
	group := at("g", open, tripped, 5*time.Second)
	group.entry.Keys = &resiliencev1alpha1.KeySummary{Keys: 12, Open: 3, Worst: []string{"eu-1", "eu-2", "us-3"}}
	members := append(closedPods("p", 2), group)
	if d := DecideFleet(fleetBreaker(0), entriesOf(members...)); d.Open || d.Verdict != nil {
		t.Errorf("a Group's Open made a fleet verdict: %+v", d)
	}
	v := Aggregate(fleetBreaker(0), entriesOf(members...))
	if v.State != open || v.Fleet != nil || v.Keys == nil || v.Keys.Open != 3 {
		t.Errorf("Aggregate of a Fleet-scoped Group: state %q, fleet %+v, keys %+v; want Open from its pods, no fleet rule", v.State, v.Fleet, v.Keys)
	}
}
