package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// errStale says a write was refused because it was computed from an object
// older than the stored one.
var errStale = errors.New("computed from a stale object")

// Client-side rate limits of the manager. Every pod report reconciles its
// namespace, and each reconcile may patch a status, so a fleet's reports after
// one config change or one fleet verdict arrive as a burst; at client-go's
// defaults (20 QPS, burst 30) the next ConfigMap write then waited in the
// limiter for up to seconds (measured with 20 instances, docs/benchmarks.md).
// The API server's own priority and fairness still protects it.
const (
	DefaultQPS   = 100
	DefaultBurst = 200
)

// FieldOwner is the field manager of every write the controller makes.
const FieldOwner = "fusebox-controller"

// CircuitBreakerReconciler publishes the CircuitBreakers of a namespace into its
// fusebox-breakers ConfigMap and reports on them. Requests are keyed by the
// ConfigMap (namespace/fusebox-breakers), whatever object triggered them.
//
// It runs as two controllers with queues of their own, one that publishes and
// one that writes status. Every pod report starts a status write, and a status
// write on an object that many pods also write costs the API server tens to
// hundreds of milliseconds when the pods are busy writing it too; with one
// queue, a spec change or a fleet verdict waited behind them. Publishing only
// reads and writes the ConfigMap.
type CircuitBreakerReconciler struct {
	client.Client
	// APIReader reads around the cache, which holds only ConfigMaps labelled as
	// Fusebox's: it finds a ConfigMap whose label was edited away.
	APIReader client.Reader
	Recorder  recorder.EventRecorder
	// Metrics, when set, receives every breaker's aggregated status.
	Metrics *Metrics
}

// +kubebuilder:rbac:groups=resilience.fusebox.dev,resources=circuitbreakers,verbs=get;list;watch
// +kubebuilder:rbac:groups=resilience.fusebox.dev,resources=circuitbreakers/status,verbs=get;patch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch

// Reconcile is one full pass over the request's namespace, what the two
// controllers do between them: publish, then report.
func (r *CircuitBreakerReconciler) Reconcile(ctx context.Context, req reconcile.Request) (ctrl.Result, error) {
	if _, err := r.ReconcileConfig(ctx, req); err != nil {
		return ctrl.Result{}, err
	}
	return r.ReconcileStatus(ctx, req)
}

// ReconcileConfig renders every CircuitBreaker of the request's namespace and
// publishes the result in the namespace's ConfigMap. It writes nothing when
// nothing changed.
func (r *CircuitBreakerReconciler) ReconcileConfig(ctx context.Context, req reconcile.Request) (ctrl.Result, error) {
	log := logf.FromContext(ctx)
	var breakers resiliencev1alpha1.CircuitBreakerList
	if err := r.List(ctx, &breakers, client.InNamespace(req.Namespace)); err != nil {
		return ctrl.Result{}, fmt.Errorf("list CircuitBreakers: %w", err)
	}
	cm, err := r.getConfigMap(ctx, req.Namespace, len(breakers.Items) > 0)
	if err != nil {
		return ctrl.Result{}, err
	}
	plan := planConfig(breakers.Items, cm)
	if err := r.publish(ctx, req.Namespace, cm, plan.data); err != nil {
		return ctrl.Result{}, err
	}
	for _, o := range plan.outcomes {
		switch {
		case o.err != nil:
			log.Error(o.err, "CircuitBreaker cannot be rendered; its last published config stays", "circuitBreaker", o.breaker.Name)
		case o.changed:
			r.Recorder.Eventf(o.breaker, nil, corev1.EventTypeNormal, resiliencev1alpha1.ReasonConfigPublished, "Publish",
				"Published generation %d in ConfigMap %s", o.breaker.Generation, resiliencev1alpha1.ConfigMapName)
		}
	}
	return ctrl.Result{}, nil
}

// ReconcileStatus prunes the reports of pods that are gone and updates every
// breaker's status from what is published and what its pods report. It writes
// nothing when nothing changed.
func (r *CircuitBreakerReconciler) ReconcileStatus(ctx context.Context, req reconcile.Request) (ctrl.Result, error) {
	var breakers resiliencev1alpha1.CircuitBreakerList
	if err := r.List(ctx, &breakers, client.InNamespace(req.Namespace)); err != nil {
		return ctrl.Result{}, fmt.Errorf("list CircuitBreakers: %w", err)
	}
	for i := range breakers.Items {
		if err := r.pruneMembers(ctx, &breakers.Items[i]); errors.Is(err, errStale) {
			return ctrl.Result{}, nil // the newer version's watch event reconciles again
		} else if err != nil {
			return ctrl.Result{}, err
		}
	}
	cm, err := r.getConfigMap(ctx, req.Namespace, len(breakers.Items) > 0)
	if err != nil {
		return ctrl.Result{}, err
	}
	for _, o := range planConfig(breakers.Items, cm).outcomes {
		if err := r.updateStatus(ctx, o); err != nil {
			return ctrl.Result{}, err
		}
	}
	r.Metrics.forget(req.Namespace, breakers.Items)
	return ctrl.Result{}, nil
}

// getConfigMap returns the namespace's published ConfigMap, or nil if there is none.
// With no breakers in the namespace it trusts the cache alone: pod deletions
// reconcile every namespace, and most namespaces have nothing of Fusebox's.
func (r *CircuitBreakerReconciler) getConfigMap(ctx context.Context, namespace string, haveBreakers bool) (*corev1.ConfigMap, error) {
	key := types.NamespacedName{Namespace: namespace, Name: resiliencev1alpha1.ConfigMapName}
	var cm corev1.ConfigMap
	err := r.Get(ctx, key, &cm)
	if apierrors.IsNotFound(err) && haveBreakers {
		// The cache sees only labelled ConfigMaps; one whose label was edited
		// away still exists and must be taken back rather than re-created.
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

// publish makes the namespace's ConfigMap hold exactly data: created when the
// first breaker appears, deleted with the last, updated only when it differs.
func (r *CircuitBreakerReconciler) publish(ctx context.Context, namespace string, cm *corev1.ConfigMap, data map[string]string) error {
	log := logf.FromContext(ctx)
	switch {
	case cm == nil && len(data) == 0:
		return nil
	case cm == nil:
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace,
			Name:      resiliencev1alpha1.ConfigMapName,
			Labels:    map[string]string{resiliencev1alpha1.ManagedByLabel: resiliencev1alpha1.ManagedByValue},
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
	if maps.Equal(cm.Data, data) && cm.Labels[resiliencev1alpha1.ManagedByLabel] == resiliencev1alpha1.ManagedByValue && len(cm.BinaryData) == 0 {
		return nil
	}
	updated := cm.DeepCopy()
	updated.Data = data
	updated.BinaryData = nil
	if updated.Labels == nil {
		updated.Labels = map[string]string{}
	}
	updated.Labels[resiliencev1alpha1.ManagedByLabel] = resiliencev1alpha1.ManagedByValue
	// Update, not patch: the resourceVersion makes a concurrent hand edit
	// conflict and come back through the queue instead of being half-merged.
	if err := r.Update(ctx, updated, client.FieldOwner(FieldOwner)); err != nil {
		return fmt.Errorf("update ConfigMap %s/%s: %w", namespace, cm.Name, err)
	}
	log.Info("Updated ConfigMap", "configMap", cm.Name, "breakers", len(data))
	return nil
}

// updateStatus patches one breaker's status when it changed, and records the
// Events its change means. Ready and observedGeneration move to a generation
// only once its config is in the ConfigMap; the ConfigMap's own update starts
// the reconcile that moves them.
func (r *CircuitBreakerReconciler) updateStatus(ctx context.Context, o outcome) error {
	cb := o.breaker
	desired := cb.DeepCopy()
	desired.Status.ConfigMapName = resiliencev1alpha1.ConfigMapName
	desired.Status.State, desired.Status.MemberCounts = aggregate(desired)
	if o.err != nil || !o.changed {
		desired.Status.ObservedGeneration = cb.Generation
		setReadyCondition(desired, o.err)
	}
	setOpenCondition(desired)
	setConfigAppliedCondition(desired)
	stampObservedGeneration(desired)

	if !equality.Semantic.DeepEqual(cb.Status, desired.Status) {
		// The optimistic lock refuses a patch computed from a stale cache, whose
		// Events would repeat the ones the fresher reconcile already recorded. A
		// conflict means a newer version exists, and its watch event reconciles
		// again, so it needs no retry of its own.
		patch := client.MergeFromWithOptions(cb, client.MergeFromWithOptimisticLock{})
		err := r.Status().Patch(ctx, desired, patch, client.FieldOwner(FieldOwner))
		switch {
		case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return fmt.Errorf("patch status of CircuitBreaker %s/%s: %w", cb.Namespace, cb.Name, err)
		}
	}
	r.recordEvents(cb, desired, o)
	r.Metrics.observe(desired)
	return nil
}

// recordEvents records what changed between the stored status and the new one,
// once the new one is stored. Each Event follows a change of stored status, so
// a reconcile that changes nothing records nothing, and a restarted controller
// does not repeat them.
func (r *CircuitBreakerReconciler) recordEvents(cb, desired *resiliencev1alpha1.CircuitBreaker, o outcome) {
	if o.err != nil && !sameCondition(cb, desired, resiliencev1alpha1.ConditionReady) {
		r.Recorder.Eventf(cb, nil, corev1.EventTypeWarning, resiliencev1alpha1.ReasonConfigInvalid, "Render",
			"Not published, the last good config stays: %v", o.err)
	}

	if from, to := cb.Status.State, desired.Status.State; from != to {
		r.Metrics.transition(cb, to)
		switch to {
		case resiliencev1alpha1.StateOpen:
			r.Recorder.Eventf(cb, nil, corev1.EventTypeWarning, resiliencev1alpha1.EventCircuitOpened, "Open", "%s", openedMessage(desired))
		case resiliencev1alpha1.StateHalfOpen:
			r.Recorder.Eventf(cb, nil, corev1.EventTypeNormal, resiliencev1alpha1.EventCircuitHalfOpened, "HalfOpen",
				"%d of %d pods are probing whether the dependency is back", desired.Status.MemberCounts.HalfOpen, desired.Status.MemberCounts.Reporting)
		case resiliencev1alpha1.StateClosed:
			if from != "" { // a first report of Closed is no news
				r.Recorder.Eventf(cb, nil, corev1.EventTypeNormal, resiliencev1alpha1.EventCircuitClosed, "Close",
					"The circuit is closed on all %d reporting pods", desired.Status.MemberCounts.Reporting)
			}
		}
	}

	// The stored ConfigApplied message names the refusals already reported,
	// which keeps this level-based: a refusal is news only once.
	var reported string
	if c := meta.FindStatusCondition(cb.Status.Conditions, resiliencev1alpha1.ConditionConfigApplied); c != nil &&
		c.Reason == resiliencev1alpha1.ReasonMembersRejected {
		reported = c.Message
	}
	rejected := rejections(desired.Status.Members)
	for _, rej := range rejected[:min(len(rejected), maxListed)] {
		if !strings.Contains(reported, rej) {
			r.Recorder.Eventf(cb, nil, corev1.EventTypeWarning, resiliencev1alpha1.EventConfigRejected, "Reload",
				"Pod %s; it keeps its last good configuration", rej)
		}
	}
}

// outcome is what reconciling did for one breaker.
type outcome struct {
	breaker *resiliencev1alpha1.CircuitBreaker
	err     error // why it could not be rendered, if it could not
	changed bool  // its rendered config differs from the published one
}

// configPlan is the ConfigMap data a namespace should have, and what that
// means for each breaker.
type configPlan struct {
	data     map[string]string
	outcomes []outcome
}

// planConfig renders every live breaker. A breaker that cannot be rendered keeps
// whatever was published for it before, so one bad object never takes a good
// config away from the pods; keys that belong to no breaker are dropped.
func planConfig(breakers []resiliencev1alpha1.CircuitBreaker, cm *corev1.ConfigMap) configPlan {
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
		key := configKey(cb.Name)
		o := outcome{breaker: cb}
		c, err := render(cb)
		if err == nil {
			var doc []byte
			doc, err = breakerconfig.Marshal(c)
			if err == nil {
				plan.data[key] = string(doc)
				o.changed = published[key] != string(doc)
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

// NewReconciler returns the reconciler wired to mgr's clients and event
// recorder; metrics may be nil.
func NewReconciler(mgr ctrl.Manager, metrics *Metrics) *CircuitBreakerReconciler {
	return &CircuitBreakerReconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Recorder:  mgr.GetEventRecorder(FieldOwner),
		Metrics:   metrics,
	}
}

// CacheByObject limits what the manager caches for the reconciler: of all
// ConfigMaps only the ones Fusebox publishes, so the operator's memory does not
// grow with the cluster's ConfigMaps.
func CacheByObject() map[client.Object]cache.ByObject {
	return map[client.Object]cache.ByObject{
		&corev1.ConfigMap{}: {Label: labels.SelectorFromSet(labels.Set{
			resiliencev1alpha1.ManagedByLabel: resiliencev1alpha1.ManagedByValue,
		})},
	}
}

// SetupWithManager registers the two controllers. Every CircuitBreaker event
// and every event of a fusebox-breakers ConfigMap reconciles its namespace in
// both; pod deletions reconcile its status, to prune their reports.
func (r *CircuitBreakerReconciler) SetupWithManager(mgr ctrl.Manager) error {
	toNamespace := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{
			Namespace: o.GetNamespace(), Name: resiliencev1alpha1.ConfigMapName,
		}}}
	})
	isPublished := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetName() == resiliencev1alpha1.ConfigMapName
	})
	podDeleted := predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		UpdateFunc:  func(event.UpdateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return true },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
	if err := ctrl.NewControllerManagedBy(mgr).
		Named("circuitbreaker-config").
		Watches(&resiliencev1alpha1.CircuitBreaker{}, toNamespace).
		Watches(&corev1.ConfigMap{}, toNamespace, builder.WithPredicates(isPublished)).
		Complete(reconcile.Func(r.ReconcileConfig)); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("circuitbreaker-status").
		Watches(&resiliencev1alpha1.CircuitBreaker{}, toNamespace).
		Watches(&corev1.ConfigMap{}, toNamespace, builder.WithPredicates(isPublished)).
		// Only deletions matter, to prune their reports; metadata is enough.
		Watches(&corev1.Pod{}, toNamespace, builder.OnlyMetadata, builder.WithPredicates(podDeleted)).
		Complete(reconcile.Func(r.ReconcileStatus))
}

// pruneMembers removes the entries of pods that no longer exist, so a scaled-down
// or replaced pod does not hold the breaker open forever. A pod missing from
// the cache is confirmed gone with a live read first: a new pod can report
// before the cache has seen it.
func (r *CircuitBreakerReconciler) pruneMembers(ctx context.Context, cb *resiliencev1alpha1.CircuitBreaker) error {
	// A JSON patch that removes exactly the gone entries, each behind a test of
	// its position, so the kept entries are not rewritten (a round trip through
	// metav1.Time would cut their times to the second) and a pod's concurrent
	// write makes the patch fail instead of being lost.
	type op struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value string `json:"value,omitempty"`
	}
	var ops []op
	var gone []string
	for i := len(cb.Status.Members) - 1; i >= 0; i-- {
		pod := cb.Status.Members[i].Pod
		exists, err := r.podExists(ctx, cb.Namespace, pod)
		if err != nil {
			return err
		}
		if !exists {
			path := fmt.Sprintf("/status/members/%d", i)
			ops = append(ops, op{Op: "test", Path: path + "/pod", Value: pod}, op{Op: "remove", Path: path})
			gone = append(gone, pod)
		}
	}
	if len(ops) == 0 {
		return nil
	}
	body, err := json.Marshal(ops)
	if err != nil {
		return err
	}
	original := cb.DeepCopy()
	err = r.Status().Patch(ctx, cb, client.RawPatch(types.JSONPatchType, body), client.FieldOwner(FieldOwner))
	switch {
	case apierrors.IsConflict(err) || apierrors.IsNotFound(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
		return errStale // a failed test: the list changed, and its watch event reconciles again
	case err != nil:
		return fmt.Errorf("prune members of CircuitBreaker %s/%s: %w", cb.Namespace, cb.Name, err)
	}
	slices.Sort(gone)
	r.Recorder.Eventf(original, nil, corev1.EventTypeWarning, resiliencev1alpha1.EventMemberPruned, "Prune",
		"Removed the reports of pods that no longer exist: %s", strings.Join(gone, ", "))
	return nil
}

func (r *CircuitBreakerReconciler) podExists(ctx context.Context, namespace, name string) (bool, error) {
	pod := &metav1.PartialObjectMetadata{}
	pod.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
	key := types.NamespacedName{Namespace: namespace, Name: name}
	err := r.Get(ctx, key, pod)
	if apierrors.IsNotFound(err) {
		err = r.APIReader.Get(ctx, key, pod)
	}
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err):
		return false, nil
	default:
		return false, fmt.Errorf("look up pod %s: %w", key, err)
	}
}
