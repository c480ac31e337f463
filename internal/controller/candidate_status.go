package controller

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// What status.candidate's state changes mean for the status writer: when the state was
// reached, on the operator's own clock (no pod's word dates it), and the Events
// CandidateOpened and CandidateClosed, coalesced as the state Events are: at most one per
// status write, saying how many other changes it stands for.

// candidateStateOf is cb's status.candidate.state, "" without one.
func candidateStateOf(cb *resiliencev1alpha1.CircuitBreaker) resiliencev1alpha1.State {
	if c := cb.Status.Candidate; c != nil {
		return c.State
	}
	return ""
}

// candidateSince returns computed (aggregateCandidate's answer) with its since: the
// stored one while the state stays what stored says, now when it changed. Whole seconds,
// as the API server keeps it, so a status computed again equals the stored one.
func candidateSince(stored, computed *resiliencev1alpha1.CandidateStatus) *resiliencev1alpha1.CandidateStatus {
	if computed == nil || computed.State == "" {
		return computed
	}
	out := *computed
	if stored != nil && stored.State == computed.State && stored.Since != nil {
		since := *stored.Since
		out.Since = &since
		return &out
	}
	now := metav1.NewTime(time.Now()).Rfc3339Copy()
	out.Since = &now
	return &out
}

// wroteCandidate records that key's status was written with the candidate state, and
// returns how many other candidate state changes since the last write that one stands
// for.
func (r *CircuitBreakerReconciler) wroteCandidate(key client.ObjectKey, state resiliencev1alpha1.State) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.record(key).candidate.wrote(state)
}

// recordCandidateEvent records CandidateOpened or CandidateClosed when the stored
// candidate state changes to Open, or to Closed from another state. Both are Normal: the
// candidate refused nothing. A candidate that first reports Closed, or one removed, is
// no news; nor is half-open, which the Open before it announced.
func (r *CircuitBreakerReconciler) recordCandidateEvent(cb, desired *resiliencev1alpha1.CircuitBreaker, coalesced int) {
	from, to := candidateStateOf(cb), candidateStateOf(desired)
	if from == to || to == "" || to == resiliencev1alpha1.StateHalfOpen || (to == resiliencev1alpha1.StateClosed && from == "") {
		return
	}
	c := desired.Status.Candidate
	var more string
	if coalesced > 0 {
		more = fmt.Sprintf(" (%d more candidate state changes since the last status write, coalesced into this one)", coalesced)
	}
	enforced := "the enforced policy refused none"
	if b := c.Enforced; b != nil && b.Refused > 0 {
		enforced = fmt.Sprintf("the enforced policy refused %d", b.Refused)
	}
	if to == resiliencev1alpha1.StateOpen {
		r.eventf(cb, corev1.EventTypeNormal, resiliencev1alpha1.EventCandidateOpened, "JudgeCandidate",
			"The candidate policy (spec.candidate) would be open on %d of %d pods; it refuses nothing, only counts: it would have refused %d calls so far and %s%s",
			c.Open, c.Pods, c.WouldRefuse, enforced, more)
		return
	}
	r.eventf(cb, corev1.EventTypeNormal, resiliencev1alpha1.EventCandidateClosed, "JudgeCandidate",
		"The candidate policy (spec.candidate) would be closed again on %d of %d pods; so far it opened %d times and would have refused %d calls, and %s%s",
		c.Pods-c.Open-c.HalfOpen, c.Pods, c.Opens, c.WouldRefuse, enforced, more)
}
