package counting

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// These tests need no cluster: what the reports add up to is a pure function of them.
// Most of them speak of pods, each reporting on its own (a pod's BreakerReport entry read
// by FromPod as a node holding that one pod), so that they state the per-pod rules of
// docs/design.md §5.12 and §5.17 as they were first written; node_test.go,
// fromnode_test.go and carriers_test.go state what a node's entry adds.

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

const (
	closed   = resiliencev1alpha1.StateClosed
	open     = resiliencev1alpha1.StateOpen
	halfOpen = resiliencev1alpha1.StateHalfOpen

	started   = breakerconfig.ReasonStarted
	tripped   = breakerconfig.ReasonTripped
	manual    = breakerconfig.ReasonManual
	failed    = breakerconfig.ReasonProbeFailed
	succeeded = breakerconfig.ReasonProbesSucceeded
	timedOut  = breakerconfig.ReasonTimedOut
	adopted   = breakerconfig.ReasonAdopted
	forced    = breakerconfig.ReasonForced
)

// member is one pod's entry of its own BreakerReport, with the since the operator attests
// for it and the pod's revision from the operator's pod cache.
type member struct {
	pod      string
	entry    resiliencev1alpha1.BreakerReportEntry
	since    time.Time
	revision string
}

// entriesOf reads each member as the operator reads a pod's own report: an entry of one
// pod (FromPod).
func entriesOf(members ...member) []Entry {
	out := make([]Entry, len(members))
	for i := range members {
		m := &members[i]
		out[i] = FromPod(m.pod, &m.entry, m.since, m.revision)
	}
	return out
}

// at is a pod's entry for breaker "b" reached at t0+offset, on generation 1, its since
// taken as the operator's attested one.
func at(pod string, state resiliencev1alpha1.State, reason string, offset time.Duration) member {
	since := t0.Add(offset)
	return member{pod: pod, since: since, entry: resiliencev1alpha1.BreakerReportEntry{
		Name: "b", PodCircuit: resiliencev1alpha1.PodCircuit{State: state, Since: metav1.NewTime(since), ConfigGeneration: 1}, Reason: reason,
	}}
}

// openedK is a pod's earned Open at t0+offset that was its k-th consecutive open, lasting
// period, as an agent that backs off reports it.
func openedK(pod, reason string, offset time.Duration, k int32, period time.Duration) member {
	m := at(pod, open, reason, offset)
	m.entry.ConsecutiveOpens, m.entry.OpenTimeout = k, &metav1.Duration{Duration: period}
	return m
}

// fleetBreaker is a Fleet breaker created an hour before t0, at generation 1, whose open
// period (1s) is shorter than the skew: any earned Closed after the open counts.
func fleetBreaker(quorum int32) *resiliencev1alpha1.CircuitBreaker {
	return &resiliencev1alpha1.CircuitBreaker{
		ObjectMeta: metav1.ObjectMeta{Name: "b", Generation: 1, CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour))},
		Spec: resiliencev1alpha1.CircuitBreakerSpec{Scope: resiliencev1alpha1.ScopeFleet, FleetQuorumPercent: ptr.To(quorum),
			OpenTimeout: &metav1.Duration{Duration: time.Second}},
	}
}

// podBreaker is a Pod-scope breaker at generation gen.
func podBreaker(gen int64) *resiliencev1alpha1.CircuitBreaker {
	return &resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "b", Generation: gen}}
}

// throttled is a breaker with adaptive throttling at k.
func throttled(k float64) *resiliencev1alpha1.CircuitBreaker {
	return &resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "b", Generation: 1},
		Spec: resiliencev1alpha1.CircuitBreakerSpec{Throttle: &resiliencev1alpha1.Throttle{K: ptr.To(k)}}}
}

// closedPods returns n pods named prefix-i that have not moved since t0.
func closedPods(prefix string, n int) []member {
	out := make([]member, n)
	for i := range out {
		out[i] = at(fmt.Sprintf("%s-%d", prefix, i), closed, started, 0)
	}
	return out
}

// trafficMember is a closed pod whose entry reports a traffic window.
func trafficMember(pod string, requests, accepts, retries, throttled *int64) member {
	return member{pod: pod, entry: resiliencev1alpha1.BreakerReportEntry{Name: "b", PodCircuit: resiliencev1alpha1.PodCircuit{State: closed}, Requests: requests, Accepts: accepts, Retries: retries, Throttled: throttled}}
}

func ptrEqual(a, b *int32) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

func deref(p *int32) any {
	if p == nil {
		return "unset"
	}
	return *p
}
