package controller

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// overrideState is what a breaker's spec.override means at one instant: nothing, a hold
// in force for remaining more, or a hold whose until has passed.
type overrideState struct {
	override *resiliencev1alpha1.Override // spec.override; nil when unset
	// until is when the override ends: its until, or, for an until beyond the bound,
	// MaxOverrideDuration after the operator first saw the override.
	until time.Time
	// bounded: spec.override.until is beyond the bound, and until is the bound.
	bounded bool
	// remaining is how long the override stays in force; 0 when it is not in force.
	remaining time.Duration
}

// overrideAt reads cb's override at now, firstSeen being when the operator first saw it.
// An override is in force while now is before its until; at until itself spec.mode
// applies again. An until more than MaxOverrideDuration after firstSeen counts as
// firstSeen + MaxOverrideDuration: the admission webhook refuses such an until, and the
// API server's own schema cannot (a bound relative to now), so a write made around the
// webhook is held no longer than one made through it.
func overrideAt(cb *resiliencev1alpha1.CircuitBreaker, now, firstSeen time.Time) overrideState {
	o := cb.Spec.Override
	if o == nil {
		return overrideState{}
	}
	s := overrideState{override: o, until: o.Until.Time}
	if bound := firstSeen.Add(resiliencev1alpha1.MaxOverrideDuration); s.until.After(bound) {
		s.until, s.bounded = bound, true
	}
	if now.Before(s.until) {
		s.remaining = s.until.Sub(now)
	}
	return s
}

// overrideKey is one override of one breaker: another mode, until or reason is another
// override, first seen when it was written.
type overrideKey struct {
	namespace    string
	uid          types.UID
	mode, reason string
	until        time.Time
}

// overrideSeen returns when the operator first saw cb's override (now for one it had
// not), and forgets the overrides of cb it no longer holds. In memory: after a restart
// an override is first seen at the restart, as report entries are.
func (r *CircuitBreakerReconciler) overrideSeen(cb *resiliencev1alpha1.CircuitBreaker, now time.Time) time.Time {
	o := cb.Spec.Override
	if o == nil {
		return now
	}
	key := overrideKey{namespace: cb.Namespace, uid: cb.UID, mode: string(o.Mode), reason: o.Reason, until: o.Until.Time}
	r.mu.Lock()
	defer r.mu.Unlock()
	if first, ok := r.overrides[key]; ok {
		return first
	}
	for k := range r.overrides {
		if k.uid == cb.UID {
			delete(r.overrides, k)
		}
	}
	if r.overrides == nil {
		r.overrides = map[overrideKey]time.Time{}
	}
	r.overrides[key] = now
	return now
}

// forgetOverrides drops what was seen of the overrides of the namespace's breakers that
// are gone.
func (r *CircuitBreakerReconciler) forgetOverrides(namespace string, live []resiliencev1alpha1.CircuitBreaker) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k := range r.overrides {
		if k.namespace == namespace && !slices.ContainsFunc(live, func(cb resiliencev1alpha1.CircuitBreaker) bool { return cb.UID == k.uid }) {
			delete(r.overrides, k)
		}
	}
}

// inForce reports whether the override holds the circuit.
func (s overrideState) inForce() bool { return s.remaining > 0 }

// applyOverride makes the rendered mode the override's while it is in force. The
// override's mode is ForcedOpen or ForcedClosed (the schema's enum), both valid modes of
// the library, so the rendered config stays valid.
func applyOverride(c *breakerconfig.Config, s overrideState) {
	if s.inForce() {
		c.Mode = string(s.override.Mode)
	}
}

// nextExpiry is the earliest time, from now, at which one of the outcomes' overrides runs
// out; 0 when none is in force. Reconcilers requeue for it, so the ConfigMap and the
// status change at expiry without anyone touching the object, and without polling.
func nextExpiry(outcomes []outcome) time.Duration {
	var next time.Duration
	for _, o := range outcomes {
		if r := o.override.remaining; r > 0 && (next == 0 || r < next) {
			next = r
		}
	}
	return next
}

// earliest returns the sooner of two requeue delays, 0 meaning none.
func earliest(a, b time.Duration) time.Duration {
	if a == 0 || (b > 0 && b < a) {
		return b
	}
	return a
}

// setOverriddenCondition sets Overridden from the breaker's override. Its message names
// the mode, the until, who set it and why; the message of an override in force is also
// the record, kept in the API server, of which override the Events have announced.
func setOverriddenCondition(cb *resiliencev1alpha1.CircuitBreaker, s overrideState) {
	c := metav1.Condition{Type: resiliencev1alpha1.ConditionOverridden, Status: metav1.ConditionFalse}
	switch {
	case s.override == nil:
		c.Reason = resiliencev1alpha1.ReasonNoOverride
		c.Message = fmt.Sprintf("No override is set; spec.mode (%s) applies", specMode(cb))
	case s.inForce():
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, resiliencev1alpha1.ReasonOverrideActive, activeOverrideMessage(cb, s)
	default:
		c.Reason = resiliencev1alpha1.ReasonOverrideExpired
		c.Message = fmt.Sprintf("The %s override ended at %s; spec.mode (%s) applies again (it was set by %s: %s)%s",
			s.override.Mode, formatTime(s.until), specMode(cb), overriddenBy(cb), s.override.Reason, boundNote(s))
	}
	meta.SetStatusCondition(&cb.Status.Conditions, c)
}

// activeOverrideMessage is the Overridden message of cb's override while it is in force.
func activeOverrideMessage(cb *resiliencev1alpha1.CircuitBreaker, s overrideState) string {
	o := cb.Spec.Override
	return fmt.Sprintf("Held %s until %s by %s: %s%s", o.Mode, formatTime(s.until), overriddenBy(cb), o.Reason, boundNote(s))
}

// boundNote says that the override's until was beyond the bound, and what it asked.
func boundNote(s overrideState) string {
	if !s.bounded {
		return ""
	}
	return fmt.Sprintf(" (spec.override.until %s is more than %d days after the operator first saw the override: held until then at most)",
		formatTime(s.override.Until.Time), resiliencev1alpha1.MaxOverrideDuration/(24*time.Hour))
}

func formatTime(t time.Time) string {
	return t.UTC().Format(time.RFC3339)
}

// overriddenBy is who set cb's override, as the mutating webhook recorded it.
func overriddenBy(cb *resiliencev1alpha1.CircuitBreaker) string {
	if who := cb.Annotations[resiliencev1alpha1.AnnotationOverriddenBy]; who != "" {
		return who
	}
	return "an unrecorded user (no " + resiliencev1alpha1.AnnotationOverriddenBy + " annotation)"
}

func specMode(cb *resiliencev1alpha1.CircuitBreaker) resiliencev1alpha1.Mode {
	if cb.Spec.Mode == "" {
		return resiliencev1alpha1.ModeEnforce
	}
	return cb.Spec.Mode
}

// overrideEvent is the Event that the change of the Overridden condition from stored to
// desired means, if any: the stored condition, not the operator's memory, says what was
// announced, so each Event is recorded once, also across restarts of the operator.
//
//   - OverrideStarted: an override is in force that the stored condition does not show
//     (a new one, or one whose mode, until or reason changed).
//   - OverrideExpired: the override the stored condition shows in force ran out.
//   - OverrideCancelled: it was removed before its until, or replaced by one that has
//     already ended (the webhook refuses such an until; this is for writes around it).
func overrideEvent(stored, desired *resiliencev1alpha1.CircuitBreaker, s overrideState) (reason, eventType, message string, ok bool) {
	was := meta.FindStatusCondition(stored.Status.Conditions, resiliencev1alpha1.ConditionOverridden)
	now := meta.FindStatusCondition(desired.Status.Conditions, resiliencev1alpha1.ConditionOverridden)
	if now == nil {
		return "", "", "", false
	}
	wasActive := was != nil && was.Status == metav1.ConditionTrue
	switch {
	case now.Status == metav1.ConditionTrue:
		if wasActive && was.Message == now.Message {
			return "", "", "", false
		}
		return resiliencev1alpha1.EventOverrideStarted, corev1.EventTypeNormal, now.Message, true
	case !wasActive:
		return "", "", "", false
	case now.Reason == resiliencev1alpha1.ReasonOverrideExpired && desired.Spec.Override != nil &&
		was.Message == activeOverrideMessage(desired, s):
		return resiliencev1alpha1.EventOverrideExpired, corev1.EventTypeNormal,
			fmt.Sprintf("The %s override ran out at %s; spec.mode (%s) applies again",
				desired.Spec.Override.Mode, formatTime(s.until), specMode(desired)), true
	default:
		return resiliencev1alpha1.EventOverrideCancelled, corev1.EventTypeNormal,
			fmt.Sprintf("Override cancelled before its time; spec.mode (%s) applies again (was: %s)", specMode(desired), was.Message), true
	}
}

// recordOverrideEvents records the Event of the Overridden condition's change, once the
// new status is stored.
func (r *CircuitBreakerReconciler) recordOverrideEvents(stored, desired *resiliencev1alpha1.CircuitBreaker, s overrideState) {
	if reason, eventType, message, ok := overrideEvent(stored, desired, s); ok {
		r.Recorder.Eventf(stored, nil, eventType, reason, "Override", "%s", message)
	}
}

// now is the reconciler's time: its Clock, or the wall clock.
func (r *CircuitBreakerReconciler) now() time.Time {
	if r.Clock != nil {
		return r.Clock.Now()
	}
	return time.Now()
}
