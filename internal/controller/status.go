package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/counting"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// minCountsInterval is how often a breaker's status is written for changes of its counts
// and member list alone. During an incident, when every pod reports within seconds, the
// counts in between are coalesced into one write a second instead of one per report.
const minCountsInterval = time.Second

// minWriteInterval is how close together two status writes of one breaker may be, for
// any change: at most 4 a second, so at most 5 in any second even with the jitter of a
// loaded machine, whatever its pods report (a pod flapping its report as fast as the API
// server takes it fanned out to one status write and one Event per breaker per flap).
// The first change after a quiet interval is written at once: only the follow-ups wait,
// and what they changed meanwhile is coalesced into one write, whose Event says how many
// state changes it stands for.
const minWriteInterval = 250 * time.Millisecond

// writeRecord is what the reconciler remembers of one breaker's status writes.
type writeRecord struct {
	at time.Time // the last write
	// state counts the changes of status.state since the last write, candidate those
	// of status.candidate.state: what the write's Events say they stand for.
	state, candidate changeCount
}

// changeCount counts the changes of one computed state between status writes.
type changeCount struct {
	seen    resiliencev1alpha1.State // the state the last reconcile computed
	changes int                      // changes since the last write, the written one included
}

// saw counts computed if it differs from the state last seen. On the first sight since
// the operator started (first, and nothing counted yet) the state last seen is stored,
// the one the last write left.
func (c *changeCount) saw(first bool, stored, computed resiliencev1alpha1.State) {
	if first && c.changes == 0 {
		c.seen = stored
	}
	if computed != c.seen {
		c.seen, c.changes = computed, c.changes+1
	}
}

// wrote records a write of state, and returns how many other changes since the last
// write it stands for.
func (c *changeCount) wrote(state resiliencev1alpha1.State) int {
	coalesced := max(0, c.changes-1)
	c.seen, c.changes = state, 0
	return coalesced
}

// desiredStatus is cb with the status that the published config and its pods' reports
// make. Ready and observedGeneration move to a generation only once its config is in the
// ConfigMap; the ConfigMap's own update starts the reconcile that moves them.
func desiredStatus(o outcome, v counting.View) *resiliencev1alpha1.CircuitBreaker {
	desired := o.breaker.DeepCopy()
	desired.Status.ConfigMapName = breakerconfig.ConfigMapName
	desired.Status.State, desired.Status.MemberCounts, desired.Status.Members = v.State, v.Counts, v.Members
	desired.Status.ConsecutiveOpens, desired.Status.OpenTimeout, desired.Status.Keys = v.ConsecutiveOpens, v.OpenTimeout, v.Keys
	desired.Status.Traffic, desired.Status.Concurrency = v.Traffic, v.Concurrency
	desired.Status.Candidate = candidateSince(o.breaker.Status.Candidate, v.Candidate)
	desired.Status.Revisions = v.Revisions
	if o.err != nil || !o.changed {
		desired.Status.ObservedGeneration = desired.Generation
		setReadyCondition(desired, o.err)
	}
	if o.err != nil || !o.changed {
		// Like Ready, Overridden follows what the ConfigMap holds: it moves once the
		// rendered mode is published.
		setOverriddenCondition(desired, o.override)
	}
	setOpenCondition(desired, v)
	setConfigAppliedCondition(desired, v)
	stampObservedGeneration(desired)
	return desired
}

// updateStatus patches one breaker's status when it changed, and records the Events its
// change means. A change of counts or members alone within minCountsInterval of the last
// write is put off: the returned duration says when to come back.
func (r *CircuitBreakerReconciler) updateStatus(ctx context.Context, o outcome, v counting.View) (time.Duration, error) {
	cb := o.breaker
	desired := desiredStatus(o, v)
	key := client.ObjectKeyFromObject(cb)
	r.saw(key, cb, desired)
	if equality.Semantic.DeepEqual(cb.Status, desired.Status) {
		r.Metrics.observe(desired)
		return 0, nil
	}
	if wait := r.writeWait(key, cb, desired); wait > 0 {
		return wait, nil
	}
	// The optimistic lock refuses a patch computed from a stale cache, whose Events would
	// repeat the ones the fresher reconcile already recorded. A conflict means a newer
	// version exists, and its watch event reconciles again, so it needs no retry of its own.
	patch := client.MergeFromWithOptions(cb, client.MergeFromWithOptimisticLock{})
	err := r.Status().Patch(ctx, desired, patch, client.FieldOwner(FieldOwner))
	switch {
	case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("patch status of CircuitBreaker %s/%s: %w", cb.Namespace, cb.Name, err)
	}
	coalesced := r.wrote(key, desired.Status.State)
	r.recordEvents(cb, desired, o, v, coalesced)
	r.recordCandidateEvent(cb, desired, r.wroteCandidate(key, candidateStateOf(desired)))
	r.recordOverrideEvents(cb, desired, o.override)
	r.Metrics.observe(desired)
	return 0, nil
}

// writeWait is how long to put off a status write; zero to write now. A change of
// counts and the member list alone waits minCountsInterval after the last write, any
// other change minWriteInterval.
func (r *CircuitBreakerReconciler) writeWait(key client.ObjectKey, cb, desired *resiliencev1alpha1.CircuitBreaker) time.Duration {
	interval := minCountsInterval
	if !countsOnly(cb, desired) {
		interval = minWriteInterval
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := r.writes[key]
	if rec == nil || rec.at.IsZero() {
		return 0
	}
	return interval - time.Since(rec.at)
}

// countsOnly reports whether desired changes nothing of cb's status but counts and the
// member list: no state, generation, open period, candidate state, condition or
// revision's verdict.
func countsOnly(cb, desired *resiliencev1alpha1.CircuitBreaker) bool {
	if cb.Status.State != desired.Status.State || cb.Status.ObservedGeneration != desired.Status.ObservedGeneration ||
		cb.Status.MemberCounts == nil || desired.Status.MemberCounts == nil ||
		cb.Status.ConsecutiveOpens != desired.Status.ConsecutiveOpens || // a re-open, at most one per open period
		candidateStateOf(cb) != candidateStateOf(desired) ||
		counting.RevisionsMoved(cb.Status.Revisions, desired.Status.Revisions) {
		return false
	}
	for _, c := range desired.Status.Conditions {
		if old := meta.FindStatusCondition(cb.Status.Conditions, c.Type); old == nil || old.Status != c.Status || old.Reason != c.Reason {
			return false
		}
	}
	return true
}

// record returns key's write record, made when missing. r.mu must be held.
func (r *CircuitBreakerReconciler) record(key client.ObjectKey) *writeRecord {
	if r.writes == nil {
		r.writes = map[client.ObjectKey]*writeRecord{}
	}
	rec := r.writes[key]
	if rec == nil {
		rec = &writeRecord{}
		r.writes[key] = rec
	}
	return rec
}

// saw counts the changes of key's computed state and candidate state (desired's) since
// its last write; stored is the breaker as the last write left it.
func (r *CircuitBreakerReconciler) saw(key client.ObjectKey, stored, desired *resiliencev1alpha1.CircuitBreaker) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := r.record(key)
	first := rec.at.IsZero()
	rec.state.saw(first, stored.Status.State, desired.Status.State)
	rec.candidate.saw(first, candidateStateOf(stored), candidateStateOf(desired))
}

// wrote records that key's status was written with state, and returns how many other
// state changes since the last write that one stands for.
func (r *CircuitBreakerReconciler) wrote(key client.ObjectKey, state resiliencev1alpha1.State) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := r.record(key)
	rec.at = time.Now()
	return rec.state.wrote(state)
}

// forgetWrites drops the write records of breakers that are gone.
func (r *CircuitBreakerReconciler) forgetWrites(namespace string, live []resiliencev1alpha1.CircuitBreaker) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for key := range r.writes {
		if key.Namespace != namespace {
			continue
		}
		found := false
		for i := range live {
			found = found || live[i].Name == key.Name
		}
		if !found {
			delete(r.writes, key)
		}
	}
}

// reopened reports whether a breaker that stays Open entered another, backed-off open
// period: a fleet whose probe failed on some pod, or a pod that re-opened while another
// held the breaker open. Its state does not change, but the news is as big as an open.
func reopened(cb, desired *resiliencev1alpha1.CircuitBreaker) bool {
	return cb.Status.State == resiliencev1alpha1.StateOpen && desired.Status.State == resiliencev1alpha1.StateOpen &&
		desired.Status.ConsecutiveOpens > cb.Status.ConsecutiveOpens && cb.Status.ConsecutiveOpens > 0
}

// recordEvents records what changed between the stored status and the new one, once the
// new one is stored. Each Event follows a change of stored status, so a reconcile that
// changes nothing records nothing, and a restarted controller does not repeat them.
//
// What the pods' reports change makes at most one Event per write, so at most as many as
// writes (minWriteInterval): the change of state (or a re-open) first, else one
// ConfigRejected naming every new refusal, else one ReportShapeIgnored. What a write
// coalesced (coalesced other state changes since the last write) its state Event says.
func (r *CircuitBreakerReconciler) recordEvents(cb, desired *resiliencev1alpha1.CircuitBreaker, o outcome, v counting.View, coalesced int) {
	if o.err != nil && !sameCondition(cb, desired, resiliencev1alpha1.ConditionReady) {
		r.eventf(cb, corev1.EventTypeWarning, resiliencev1alpha1.ReasonConfigInvalid, "Render",
			"Not published, the last good config stays: %v", o.err)
	}
	if r.recordStateEvent(cb, desired, v, coalesced) {
		return
	}
	// The stored ConfigApplied message names the refusals and odd shapes already
	// reported, which keeps this level-based: each is news only once.
	var reported string
	if c := meta.FindStatusCondition(cb.Status.Conditions, resiliencev1alpha1.ConditionConfigApplied); c != nil {
		reported = c.Message
	}
	var news []string
	for _, rej := range v.Rejected {
		if !strings.Contains(reported, rej) {
			news = append(news, rej)
		}
	}
	if len(news) > 0 {
		r.eventf(cb, corev1.EventTypeWarning, resiliencev1alpha1.EventConfigRejected, "Reload",
			"%d pods refused the published configuration and keep their last good one: %s", len(news), counting.JoinLimited(news))
		return
	}
	if c := meta.FindStatusCondition(desired.Status.Conditions, resiliencev1alpha1.ConditionConfigApplied); c != nil &&
		c.Reason == ReasonReportShapesMixed && c.Message != reported {
		r.eventf(cb, corev1.EventTypeWarning, EventReportShapeIgnored, "Aggregate", "%s", c.Message)
	}
}

// recordStateEvent records the Event of a change of state, or of a re-open, if there is
// one, and says whether it did.
func (r *CircuitBreakerReconciler) recordStateEvent(cb, desired *resiliencev1alpha1.CircuitBreaker, v counting.View, coalesced int) bool {
	var more string
	if coalesced > 0 {
		more = fmt.Sprintf(" (%d more state changes since the last status write, coalesced into this one)", coalesced)
	}
	if reopened(cb, desired) {
		r.eventf(cb, corev1.EventTypeWarning, resiliencev1alpha1.EventCircuitOpened, "Open", "%s%s", v.OpenedMessage(cb), more)
		return true
	}
	from, to := cb.Status.State, desired.Status.State
	if from == to {
		return false
	}
	r.Metrics.transition(cb, to)
	switch to {
	case resiliencev1alpha1.StateOpen:
		r.eventf(cb, corev1.EventTypeWarning, resiliencev1alpha1.EventCircuitOpened, "Open", "%s%s", v.OpenedMessage(cb), more)
	case resiliencev1alpha1.StateHalfOpen:
		r.eventf(cb, corev1.EventTypeNormal, resiliencev1alpha1.EventCircuitHalfOpened, "HalfOpen", "%s%s", v.HalfOpenedMessage(cb), more)
	case resiliencev1alpha1.StateClosed:
		if from == "" { // a first report of Closed is no news
			return false
		}
		r.eventf(cb, corev1.EventTypeNormal, resiliencev1alpha1.EventCircuitClosed, "Close",
			"The circuit is closed on all %d reporting pods%s", v.Counts.Reporting, more)
	default:
		return false
	}
	return true
}

// eventf records an Event on cb whose note is cut to what the API server accepts
// (eventNote): the notes of these Events name pods and what they reported, and one the
// API server refused would be lost.
func (r *CircuitBreakerReconciler) eventf(cb *resiliencev1alpha1.CircuitBreaker, eventType, reason, action, format string, args ...any) {
	r.Recorder.Eventf(cb, nil, eventType, reason, action, "%s", counting.EventNote(fmt.Sprintf(format, args...)))
}
