package controller

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/counting"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// setReadyCondition sets Ready from the outcome of rendering the breaker.
func setReadyCondition(cb *resiliencev1alpha1.CircuitBreaker, renderErr error) {
	if renderErr != nil {
		meta.SetStatusCondition(&cb.Status.Conditions, metav1.Condition{
			Type:    resiliencev1alpha1.ConditionReady,
			Status:  metav1.ConditionFalse,
			Reason:  resiliencev1alpha1.ReasonConfigInvalid,
			Message: renderErr.Error(),
		})
		return
	}
	meta.SetStatusCondition(&cb.Status.Conditions, metav1.Condition{
		Type:    resiliencev1alpha1.ConditionReady,
		Status:  metav1.ConditionTrue,
		Reason:  resiliencev1alpha1.ReasonConfigPublished,
		Message: "Configuration published in ConfigMap " + breakerconfig.ConfigMapName,
	})
}

// stampObservedGeneration marks every condition as describing the generation
// the status observed.
func stampObservedGeneration(cb *resiliencev1alpha1.CircuitBreaker) {
	for i := range cb.Status.Conditions {
		cb.Status.Conditions[i].ObservedGeneration = cb.Status.ObservedGeneration
	}
}

// sameCondition reports whether a condition type has the same status, reason
// and message in both objects.
func sameCondition(a, b *resiliencev1alpha1.CircuitBreaker, conditionType string) bool {
	ca := meta.FindStatusCondition(a.Status.Conditions, conditionType)
	cb := meta.FindStatusCondition(b.Status.Conditions, conditionType)
	if ca == nil || cb == nil {
		return ca == cb
	}
	return ca.Status == cb.Status && ca.Reason == cb.Reason && ca.Message == cb.Message
}

// setOpenCondition sets Open from the breaker's aggregated state.
func setOpenCondition(cb *resiliencev1alpha1.CircuitBreaker, v counting.View) {
	c := metav1.Condition{Type: resiliencev1alpha1.ConditionOpen, Status: metav1.ConditionFalse}
	switch v.State {
	case resiliencev1alpha1.StateOpen:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, resiliencev1alpha1.ReasonCircuitOpen, v.OpenedMessage(cb)
	case resiliencev1alpha1.StateHalfOpen:
		c.Reason, c.Message = resiliencev1alpha1.ReasonCircuitHalfOpen, "Probing whether the dependency is back"
		if m := v.FleetHalfOpen(cb); m != "" {
			c.Message = m
		}
	case resiliencev1alpha1.StateClosed:
		c.Reason, c.Message = resiliencev1alpha1.ReasonCircuitClosed, "Every reporting pod has the circuit closed"
	default:
		c.Status, c.Reason, c.Message = metav1.ConditionUnknown, resiliencev1alpha1.ReasonNoMembers, "No pod reports this breaker yet"
	}
	meta.SetStatusCondition(&cb.Status.Conditions, c)
}

// ReasonReportShapesMixed (ConfigApplied False): some pods report the breaker as a
// breaker Group and others as a plain breaker; the pods of the odd shape are left out.
const ReasonReportShapesMixed = "ReportShapesMixed"

// EventReportShapeIgnored is the Warning Event of a breaker whose ConfigApplied condition
// turns to ReportShapesMixed.
const EventReportShapeIgnored = "ReportShapeIgnored"

// setConfigAppliedCondition sets ConfigApplied from what the members run.
func setConfigAppliedCondition(cb *resiliencev1alpha1.CircuitBreaker, v counting.View) {
	c := metav1.Condition{Type: resiliencev1alpha1.ConditionConfigApplied}
	counts, rejected := v.Counts, v.Rejected
	switch {
	case counts == nil || counts.Reporting == 0:
		c.Status, c.Reason, c.Message = metav1.ConditionUnknown, resiliencev1alpha1.ReasonNoMembers, "No pod reports this breaker yet"
	case len(v.OddShape) > 0:
		c.Status, c.Reason = metav1.ConditionFalse, ReasonReportShapesMixed
		c.Message = v.OddShapeMessage()
	case len(rejected) > 0:
		c.Status, c.Reason = metav1.ConditionFalse, resiliencev1alpha1.ReasonMembersRejected
		c.Message = fmt.Sprintf("%d of %d pods refused the published configuration and keep their last good one: %s",
			len(rejected), counts.Reporting, counting.JoinLimited(rejected))
	case counts.OnLatestConfig < counts.Reporting:
		c.Status, c.Reason = metav1.ConditionFalse, resiliencev1alpha1.ReasonMembersBehind
		c.Message = fmt.Sprintf("%d of %d pods run generation %d", counts.OnLatestConfig, counts.Reporting, cb.Generation)
	default:
		c.Status, c.Reason = metav1.ConditionTrue, resiliencev1alpha1.ReasonAllMembersApplied
		c.Message = fmt.Sprintf("All %d pods run generation %d", counts.Reporting, cb.Generation)
	}
	meta.SetStatusCondition(&cb.Status.Conditions, c)
}
