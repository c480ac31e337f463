package counting

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// The sentences of the Open condition and the Events, and the figures the ConfigApplied
// condition is written from. The conditions' own wording (NoMembers, "All N pods run
// generation G", ...) is the controller's.
func TestConditionMessages(t *testing.T) {
	s := time.Second
	withEvidence := func(m member) member {
		m.entry.FailureRatePercent, m.entry.Calls = ptr.To[int32](55), ptr.To[int64](40)
		return m
	}
	podScope := podBreaker(1)
	slowScope := podScope.DeepCopy()
	slowScope.Spec.SlowCallDuration = &metav1.Duration{Duration: 2 * time.Second}
	slowFleet := fleetBreaker(0)
	slowFleet.Spec.SlowCallDuration = &metav1.Duration{Duration: 250 * time.Millisecond}
	slowFleet.Spec.MaxOpenTimeout = &metav1.Duration{Duration: time.Minute} // its 2nd open lasts 2s
	slowly := func(m member) member {
		m.entry.Trigger = breakerconfig.TriggerSlowCallRate
		m.entry.SlowCallRatePercent, m.entry.FailureRatePercent, m.entry.Calls = ptr.To[int32](85), ptr.To[int32](0), ptr.To[int64](20)
		return m
	}
	backedOff := func(k int32, d time.Duration, m member) member {
		m.entry.ConsecutiveOpens, m.entry.OpenTimeout = k, &metav1.Duration{Duration: d}
		return m
	}
	trigger := func(tr string, m member) member { m.entry.Trigger = tr; return m }
	tenPods := func(opens ...member) []member { return append(closedPods("p", 10-len(opens)), opens...) }
	behind := at("b", closed, started, 0)
	behind.entry.ConfigGeneration = 0
	refusing := at("b", closed, started, 0)
	refusing.entry.ConfigError = "window: bad"
	for _, tc := range []struct {
		name         string
		cb           *resiliencev1alpha1.CircuitBreaker
		members      []member
		state        resiliencev1alpha1.State
		message      string // OpenedMessage when Open, FleetHalfOpen otherwise
		onLatest     int32
		wantRejected []string
	}{
		{"closed", podScope, closedPods("p", 2), closed, "", 2, nil},
		{"Pod scope: names the pod, its reason and its evidence", podScope,
			[]member{at("no-evidence", open, tripped, 0), withEvidence(at("web-7d9f", open, tripped, 0)), at("other", closed, started, 9*s)},
			open, "Pod web-7d9f opened the circuit at 2026-11-29T12:00:00Z (Tripped): 55% of 40 calls failed", 3, nil},
		{"Pod scope: a slow-call trip says so, with the rate and what is slow", slowScope,
			[]member{slowly(at("web-1", open, tripped, 0)), at("web-2", closed, started, 0)},
			open, "Pod web-1 opened the circuit at 2026-11-29T12:00:00Z (Tripped): slow-call rate 85% of 20 calls (slow: 2s or longer)", 2, nil},
		{"Pod scope: a failure-rate trip", podScope,
			[]member{trigger(breakerconfig.TriggerFailureRate, withEvidence(at("web-1", open, tripped, 0)))},
			open, "Pod web-1 opened the circuit at 2026-11-29T12:00:00Z (Tripped): 55% of 40 calls failed", 1, nil},
		{"Pod scope: a slow probe, backed off", slowScope,
			[]member{backedOff(3, 2*time.Minute, trigger(breakerconfig.TriggerSlowProbe, at("web-1", open, failed, 0)))},
			open, "Pod web-1 opened the circuit at 2026-11-29T12:00:00Z (ProbeFailed): a probe was slow (slow: 2s or longer). Open for 2m0s, the 3rd consecutive open", 1, nil},
		{"Pod scope: a failed probe, a first open says no period", podScope,
			[]member{backedOff(1, 30*time.Second, trigger(breakerconfig.TriggerFailedProbe, at("web-1", open, failed, 0)))},
			open, "Pod web-1 opened the circuit at 2026-11-29T12:00:00Z (ProbeFailed): a probe failed", 1, nil},
		{"Fleet: a slow-call trip and the verdict's backed-off period", slowFleet,
			[]member{backedOff(2, 2*time.Second, slowly(at("x", open, failed, 5*s))), backedOff(1, time.Second, at("y", open, adopted, 1*s))},
			open, "The fleet is open since 2026-11-29T12:00:05Z: 1 of 2 pods opened on their own evidence (quorum 1 pod): x: slow-call rate 85% of 20 calls (slow: 250ms or longer). Open for 2s, the 2nd consecutive open", 2, nil},
		{"half-open", podScope, []member{at("a", halfOpen, timedOut, 0)}, halfOpen, "", 1, nil},
		{"quorum 30%: two of ten say how close it is", fleetBreaker(30),
			tenPods(at("x", open, tripped, 5*s), at("y", open, tripped, 6*s)),
			halfOpen, "2 of 10 pods open on their own evidence, quorum 30% needs 3", 10, nil},
		{"quorum 30%: three of ten open it and are named", fleetBreaker(30),
			tenPods(withEvidence(at("x", open, tripped, 5*s)), at("y", open, manual, 6*s), at("z", open, failed, 7*s)),
			open, "The fleet is open since 2026-11-29T12:00:05Z: 3 of 10 pods opened on their own evidence (quorum 30%): z; y; x: 55% of 40 calls failed", 10, nil},
		{"behind", podScope, []member{at("a", closed, started, 0), behind}, closed, "", 1, nil},
		{"refused", podScope, []member{at("a", closed, started, 0), refusing}, closed, "", 1, []string{"b: window: bad"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Aggregate(tc.cb, entriesOf(tc.members...))
			if v.State != tc.state {
				t.Fatalf("state %s, want %s", v.State, tc.state)
			}
			got := v.FleetHalfOpen(tc.cb)
			if v.State == open {
				got = v.OpenedMessage(tc.cb)
			}
			if got != tc.message {
				t.Errorf("message %q\nwant    %q", got, tc.message)
			}
			if v.Counts.OnLatestConfig != tc.onLatest || !slices.Equal(v.Rejected, tc.wantRejected) {
				t.Errorf("onLatestConfig %d rejected %q, want %d %q", v.Counts.OnLatestConfig, v.Rejected, tc.onLatest, tc.wantRejected)
			}
		})
	}
}

func TestJoinLimited(t *testing.T) {
	if got := JoinLimited([]string{"a", "b"}); got != "a; b" {
		t.Errorf("got %q", got)
	}
	if got := JoinLimited([]string{"a", "b", "c", "d", "e", "f", "g"}); got != "a; b; c; d; e; and 2 more" {
		t.Errorf("got %q", got)
	}
}

func TestHalfOpenedMessage(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cb      *resiliencev1alpha1.CircuitBreaker
		members []member
		want    string
	}{
		{"probing", fleetBreaker(0), []member{at("a", halfOpen, timedOut, 0), at("b", closed, started, 0)},
			"1 of 2 pods are probing whether the dependency is back"},
		{"open below the quorum", fleetBreaker(50), []member{at("a", open, tripped, 0), at("b", closed, started, 0), at("c", closed, started, 0)},
			"1 of 3 pods open on their own evidence, quorum 50% needs 2"},
		{"closed by probes, a pod still open", fleetBreaker(0), []member{at("a", open, tripped, 0), at("b", closed, succeeded, 9*time.Second)},
			"A pod's probes closed the fleet at 2026-11-29T12:00:09Z; the other pods follow"},
		{"closed by probes, a pod adopted the old open", fleetBreaker(0), []member{at("a", open, adopted, 0), at("b", closed, succeeded, 9*time.Second)},
			"A pod's probes closed the fleet at 2026-11-29T12:00:09Z; the other pods follow"},
		{"Pod scope", podBreaker(1), []member{at("a", halfOpen, timedOut, 0)},
			"1 of 1 pods are probing whether the dependency is back"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Aggregate(tc.cb, entriesOf(tc.members...))
			if v.State != halfOpen {
				t.Fatalf("state %s, want HalfOpen", v.State)
			}
			if got := v.HalfOpenedMessage(tc.cb); got != tc.want {
				t.Errorf("got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestOrdinal(t *testing.T) {
	for n, want := range map[int32]string{1: "1st", 2: "2nd", 3: "3rd", 4: "4th", 11: "11th", 12: "12th", 13: "13th", 21: "21st", 22: "22nd", 101: "101st", 111: "111th"} {
		if got := ordinal(n); got != want {
			t.Errorf("ordinal(%d) = %q, want %q", n, got, want)
		}
	}
}
