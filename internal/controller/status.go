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
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// minCountsInterval is how often a breaker's status is written for changes of its counts
// and member list alone. A change of state or of any condition is written at once; during
// an incident, when every pod reports within seconds, the counts in between are coalesced
// into one write a second instead of one per report.
const minCountsInterval = time.Second

// desiredStatus is cb with the status that the published config and its pods' reports
// make. Ready and observedGeneration move to a generation only once its config is in the
// ConfigMap; the ConfigMap's own update starts the reconcile that moves them.
func desiredStatus(o outcome, v breakerView) *resiliencev1alpha1.CircuitBreaker {
	desired := o.breaker.DeepCopy()
	desired.Status.ConfigMapName = breakerconfig.ConfigMapName
	desired.Status.State, desired.Status.MemberCounts, desired.Status.Members = v.state, v.counts, v.listed
	desired.Status.ConsecutiveOpens, desired.Status.OpenTimeout, desired.Status.Keys = v.consecutiveOpens, v.openTimeout, v.keys
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
func (r *CircuitBreakerReconciler) updateStatus(ctx context.Context, o outcome, v breakerView) (time.Duration, error) {
	cb := o.breaker
	desired := desiredStatus(o, v)
	if equality.Semantic.DeepEqual(cb.Status, desired.Status) {
		r.Metrics.observe(desired)
		return 0, nil
	}
	key := client.ObjectKeyFromObject(cb)
	if wait := r.countsWait(key, cb, desired); wait > 0 {
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
	r.wrote(key)
	r.recordEvents(cb, desired, o, v)
	r.recordOverrideEvents(cb, desired)
	r.Metrics.observe(desired)
	return 0, nil
}

// countsWait is how long to put off a status write that changes nothing but counts and
// the member list; zero to write now.
func (r *CircuitBreakerReconciler) countsWait(key client.ObjectKey, cb, desired *resiliencev1alpha1.CircuitBreaker) time.Duration {
	if cb.Status.State != desired.Status.State || cb.Status.ObservedGeneration != desired.Status.ObservedGeneration ||
		cb.Status.MemberCounts == nil || desired.Status.MemberCounts == nil ||
		cb.Status.ConsecutiveOpens != desired.Status.ConsecutiveOpens { // a re-open, at most one per open period
		return 0
	}
	for _, c := range desired.Status.Conditions {
		if old := meta.FindStatusCondition(cb.Status.Conditions, c.Type); old == nil || old.Status != c.Status || old.Reason != c.Reason {
			return 0
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return minCountsInterval - time.Since(r.lastWrite[key])
}

// wrote records when key's status was last written.
func (r *CircuitBreakerReconciler) wrote(key client.ObjectKey) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lastWrite == nil {
		r.lastWrite = map[client.ObjectKey]time.Time{}
	}
	r.lastWrite[key] = time.Now()
}

// forgetWrites drops the write times of breakers that are gone.
func (r *CircuitBreakerReconciler) forgetWrites(namespace string, live []resiliencev1alpha1.CircuitBreaker) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for key := range r.lastWrite {
		if key.Namespace != namespace {
			continue
		}
		found := false
		for i := range live {
			found = found || live[i].Name == key.Name
		}
		if !found {
			delete(r.lastWrite, key)
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
func (r *CircuitBreakerReconciler) recordEvents(cb, desired *resiliencev1alpha1.CircuitBreaker, o outcome, v breakerView) {
	if o.err != nil && !sameCondition(cb, desired, resiliencev1alpha1.ConditionReady) {
		r.Recorder.Eventf(cb, nil, corev1.EventTypeWarning, resiliencev1alpha1.ReasonConfigInvalid, "Render",
			"Not published, the last good config stays: %v", o.err)
	}

	if reopened(cb, desired) {
		r.Recorder.Eventf(cb, nil, corev1.EventTypeWarning, resiliencev1alpha1.EventCircuitOpened, "Open", "%s", openedMessage(cb, v))
	}
	if from, to := cb.Status.State, desired.Status.State; from != to {
		r.Metrics.transition(cb, to)
		switch to {
		case resiliencev1alpha1.StateOpen:
			r.Recorder.Eventf(cb, nil, corev1.EventTypeWarning, resiliencev1alpha1.EventCircuitOpened, "Open", "%s", openedMessage(cb, v))
		case resiliencev1alpha1.StateHalfOpen:
			r.Recorder.Eventf(cb, nil, corev1.EventTypeNormal, resiliencev1alpha1.EventCircuitHalfOpened, "HalfOpen", "%s", halfOpenedMessage(cb, v))
		case resiliencev1alpha1.StateClosed:
			if from != "" { // a first report of Closed is no news
				r.Recorder.Eventf(cb, nil, corev1.EventTypeNormal, resiliencev1alpha1.EventCircuitClosed, "Close",
					"The circuit is closed on all %d reporting pods", v.counts.Reporting)
			}
		}
	}

	// The stored ConfigApplied message names the refusals already reported, which keeps
	// this level-based: a refusal is news only once.
	var reported string
	if c := meta.FindStatusCondition(cb.Status.Conditions, resiliencev1alpha1.ConditionConfigApplied); c != nil &&
		c.Reason == resiliencev1alpha1.ReasonMembersRejected {
		reported = c.Message
	}
	for _, rej := range v.rejected[:min(len(v.rejected), maxListed)] {
		if !strings.Contains(reported, rej) {
			r.Recorder.Eventf(cb, nil, corev1.EventTypeWarning, resiliencev1alpha1.EventConfigRejected, "Reload",
				"Pod %s; it keeps its last good configuration", rej)
		}
	}
}
