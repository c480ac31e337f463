package controller

import (
	"context"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/counting"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// outcome is what rendering did for one breaker.
type outcome struct {
	breaker *resiliencev1alpha1.CircuitBreaker
	err     error // why it could not be rendered, if it could not
	changed bool  // its rendered config differs from the published one
	// newGeneration: the published config is of another generation (or another object of
	// that name), which is news; a new fleet verdict alone is not.
	newGeneration bool
	// fleetOnly: the published config differs in the fleet counts alone, whose write may
	// wait (minFleetInterval).
	fleetOnly bool
	// override is what spec.override means at the time of the plan.
	override overrideState
}

// configPlan is the ConfigMap data a namespace should have, and what that means for each
// breaker.
type configPlan struct {
	data     map[string]string
	outcomes []outcome
}

// planConfig renders every live breaker at now, with the fleet verdict its pods' reports
// make and the override in force.
// A breaker that cannot be rendered keeps whatever was published for it before, so one
// bad object never takes a good config away from the pods; keys that belong to no breaker
// are dropped.
//
// overrideSeen says when the operator first saw a breaker's override (nil: now).
func planConfig(now time.Time, breakers []resiliencev1alpha1.CircuitBreaker, cm *corev1.ConfigMap, reports namespaceReports,
	overrideSeen func(*resiliencev1alpha1.CircuitBreaker, time.Time) time.Time) configPlan {
	var published map[string]string
	if cm != nil {
		published = cm.Data
	}
	plan := configPlan{data: map[string]string{}}
	for i := range breakers {
		cb := &breakers[i]
		if !cb.DeletionTimestamp.IsZero() {
			continue
		}
		key := breakerconfig.Key(cb.Name)
		firstSeen := now
		if overrideSeen != nil {
			firstSeen = overrideSeen(cb, now)
		}
		o := outcome{breaker: cb, override: overrideAt(cb, now, firstSeen)}
		var verdict *breakerconfig.Verdict
		if cb.Spec.Scope == resiliencev1alpha1.ScopeFleet {
			verdict = keepPublishedStart(published[key], counting.DecideFleet(cb, reports.byBreaker[cb.Name]).Verdict)
		}
		var counted fleetCounts
		if counting.UsesTraffic(cb) {
			counted.traffic = counting.TrafficOf(cb, reports.byBreaker[cb.Name])
		}
		if counting.UsesConcurrency(cb) {
			counted.concurrency = counting.ConcurrencyOf(cb, reports.byBreaker[cb.Name])
			counted.shareGeneration = shareGeneration(published[key], counted.concurrency)
		}
		c, err := render(cb, verdict, counted)
		if err == nil {
			applyOverride(&c, o.override)
			var doc []byte
			doc, err = breakerconfig.Marshal(c)
			if err == nil {
				plan.data[key] = string(doc)
				o.changed = published[key] != string(doc)
				o.newGeneration = o.changed && !sameGeneration(published[key], c)
				o.fleetOnly = o.changed && fleetOnly(published[key], c)
			}
		}
		if err != nil {
			o.err = err
			if old, ok := published[key]; ok {
				plan.data[key] = old
			}
		}
		plan.outcomes = append(plan.outcomes, o)
	}
	return plan
}

// retimeTolerance is how far a fleet verdict's start may move before the move is
// published. The start of an Open verdict is the most recent earned Open of a quorum, so
// while a fleet trips it moves a few milliseconds with each pod's report that arrives, and
// so does a Closed verdict's while the pods close. Each publication reaches every pod of
// the namespace (at 5,000 pods, one incident re-published its verdict four times and its
// recovery seven, each a 5,000-event watch fan-out), while a move this small shortens or
// lengthens no pod's open period by more than the clock skew the fleet rule already
// tolerates (counting.MaxClockSkew).
const retimeTolerance = time.Second

// keepPublishedStart returns the published verdict in place of v when v is the same
// verdict (state, consecutive opens, open period) starting less than retimeTolerance
// from it, and v otherwise. It reads only the ConfigMap, so a restarted operator keeps
// the same start.
func keepPublishedStart(published string, v *breakerconfig.Verdict) *breakerconfig.Verdict {
	if v == nil || published == "" {
		return v
	}
	old, err := breakerconfig.Parse([]byte(published))
	if err != nil || old.Verdict == nil {
		return v
	}
	p := old.Verdict
	if p.State != v.State || p.ConsecutiveOpens != v.ConsecutiveOpens || p.OpenTimeout != v.OpenTimeout {
		return v
	}
	if d := v.Since.Sub(p.Since); d <= -retimeTolerance || d >= retimeTolerance {
		return v
	}
	kept := *p
	return &kept
}

// fleetOnly reports whether every breaker whose config changed changed in its fleet counts
// alone. A plan that changes nothing is not fleet-only: publishWait lets it through.
func (p configPlan) fleetOnly() bool {
	changed := false
	for _, o := range p.outcomes {
		if o.changed {
			if !o.fleetOnly {
				return false
			}
			changed = true
		}
	}
	return changed
}

// getConfigMap returns the namespace's published ConfigMap, or nil if there is none.
// With no breakers in the namespace it trusts the cache alone: pod events reconcile every
// namespace, and most namespaces have nothing of Fusebox's.
func (r *CircuitBreakerReconciler) getConfigMap(ctx context.Context, namespace string, haveBreakers bool) (*corev1.ConfigMap, error) {
	key := types.NamespacedName{Namespace: namespace, Name: breakerconfig.ConfigMapName}
	var cm corev1.ConfigMap
	err := r.Get(ctx, key, &cm)
	if apierrors.IsNotFound(err) && haveBreakers {
		// The cache sees only labelled ConfigMaps; one whose label was edited away still
		// exists and must be taken back rather than re-created.
		err = r.APIReader.Get(ctx, key, &cm)
	}
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("get ConfigMap %s: %w", key, err)
	}
	return &cm, nil
}

// publish makes the namespace's ConfigMap hold exactly data: created when the first
// breaker appears, deleted with the last, updated only when it differs.
func (r *CircuitBreakerReconciler) publish(ctx context.Context, namespace string, cm *corev1.ConfigMap, data map[string]string) error {
	log := logf.FromContext(ctx)
	switch {
	case cm == nil && len(data) == 0:
		return nil
	case cm == nil:
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace,
			Name:      breakerconfig.ConfigMapName,
			Labels:    map[string]string{breakerconfig.ManagedByLabel: breakerconfig.ManagedByValue},
		}, Data: data}
		if err := r.Create(ctx, cm, client.FieldOwner(FieldOwner)); err != nil {
			return fmt.Errorf("create ConfigMap %s/%s: %w", namespace, cm.Name, err)
		}
		log.Info("Created ConfigMap", "configMap", cm.Name, "breakers", len(data))
		return nil
	case len(data) == 0:
		if err := r.Delete(ctx, cm, client.Preconditions{UID: &cm.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete ConfigMap %s/%s: %w", namespace, cm.Name, err)
		}
		log.Info("Deleted ConfigMap: no CircuitBreakers left", "configMap", cm.Name)
		return nil
	}
	if maps.Equal(cm.Data, data) && cm.Labels[breakerconfig.ManagedByLabel] == breakerconfig.ManagedByValue && len(cm.BinaryData) == 0 {
		return nil
	}
	updated := cm.DeepCopy()
	updated.Data = data
	updated.BinaryData = nil
	if updated.Labels == nil {
		updated.Labels = map[string]string{}
	}
	updated.Labels[breakerconfig.ManagedByLabel] = breakerconfig.ManagedByValue
	// Update, not patch: the resourceVersion makes a concurrent hand edit conflict and
	// come back through the queue instead of being half-merged.
	if err := r.Update(ctx, updated, client.FieldOwner(FieldOwner)); err != nil {
		return fmt.Errorf("update ConfigMap %s/%s: %w", namespace, cm.Name, err)
	}
	log.Info("Updated ConfigMap", "configMap", cm.Name, "breakers", len(data))
	return nil
}

// sameGeneration reports whether the published document renders the same generation of
// the same CircuitBreaker as c.
func sameGeneration(published string, c breakerconfig.Config) bool {
	old, err := breakerconfig.Parse([]byte(published))
	return err == nil && old.Generation == c.Generation && old.UID == c.UID
}
