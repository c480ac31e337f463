package plugin

import (
	"context"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// circuitBreakerKind is the involvedObject kind of a breaker's Events.
const circuitBreakerKind = "CircuitBreaker"

// transitionReasons are the Event reasons that make a breaker's timeline: its
// state changes and its overrides.
var transitionReasons = map[string]bool{
	resiliencev1alpha1.EventCircuitOpened:     true,
	resiliencev1alpha1.EventCircuitHalfOpened: true,
	resiliencev1alpha1.EventCircuitClosed:     true,
	resiliencev1alpha1.EventOverrideStarted:   true,
	resiliencev1alpha1.EventOverrideExpired:   true,
	resiliencev1alpha1.EventOverrideCancelled: true,
}

// Transition is one entry of a breaker's timeline, read from an Event.
type Transition struct {
	// ID is the Event's namespace/name, so a repeated Event (its count going
	// up) replaces its line rather than adding one.
	ID        string    `json:"id"`
	Namespace string    `json:"namespace"`
	Breaker   string    `json:"breaker"`
	Reason    string    `json:"reason"`
	Type      string    `json:"type"`
	Message   string    `json:"message"`
	Time      time.Time `json:"time"`
	Count     int32     `json:"count"`
}

// transitionOf reads e as a timeline entry; false for an Event that is none.
func transitionOf(e *corev1.Event) (Transition, bool) {
	if e.InvolvedObject.Kind != circuitBreakerKind || !transitionReasons[e.Reason] {
		return Transition{}, false
	}
	t := Transition{
		ID:        e.Namespace + "/" + e.Name,
		Namespace: e.InvolvedObject.Namespace,
		Breaker:   e.InvolvedObject.Name,
		Reason:    e.Reason,
		Type:      e.Type,
		Message:   e.Message,
		Time:      eventTime(e),
		Count:     1,
	}
	if t.Namespace == "" {
		t.Namespace = e.Namespace
	}
	switch {
	case e.Series != nil && e.Series.Count > 0:
		t.Count = e.Series.Count
	case e.Count > 1:
		t.Count = e.Count
	}
	return t, true
}

// eventTime is when e was last seen, whichever API wrote it: events.k8s.io/v1
// fills eventTime and series, core/v1 recorders the timestamps.
func eventTime(e *corev1.Event) time.Time {
	switch {
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		return e.Series.LastObservedTime.UTC()
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.UTC()
	case !e.EventTime.IsZero():
		return e.EventTime.UTC()
	case !e.FirstTimestamp.IsZero():
		return e.FirstTimestamp.UTC()
	}
	return e.CreationTimestamp.UTC()
}

// eventSelector selects the Events of CircuitBreakers, of one when name is set.
func eventSelector(name string) client.MatchingFields {
	f := client.MatchingFields{"involvedObject.kind": circuitBreakerKind}
	if name != "" {
		f["involvedObject.name"] = name
	}
	return f
}

// transitions lists the timeline of the breaker name in ns (of every breaker
// when name is ""), oldest first.
func transitions(ctx context.Context, c client.Client, ns, name string) ([]Transition, error) {
	var list corev1.EventList
	if err := c.List(ctx, &list, client.InNamespace(ns), eventSelector(name)); err != nil {
		return nil, err
	}
	var out []Transition
	for i := range list.Items {
		if t, ok := transitionOf(&list.Items[i]); ok {
			out = append(out, t)
		}
	}
	sortTransitions(out)
	return out, nil
}

// sortTransitions puts ts oldest first.
func sortTransitions(ts []Transition) {
	sort.SliceStable(ts, func(i, j int) bool { return ts[i].Time.Before(ts[j].Time) })
}
