package controller

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/counting"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// Client-side rate limits of the manager. A fleet's reports after one config change or
// one fleet verdict arrive as a burst, and each may start a reconcile that reads around
// the cache; at client-go's defaults (20 QPS, burst 30) the next ConfigMap write then
// waited in the limiter for up to seconds (measured with 20 instances,
// docs/benchmarks.md). The API server's own priority and fairness still protects it.
const (
	DefaultQPS   = 100
	DefaultBurst = 200
)

// FieldOwner is the field manager of every write the controller makes.
const FieldOwner = "fusebox-controller"

// reportCoalesce is how far apart the status controller's reconciles for pods' reports
// start (coalesced), so that the reports of a fleet that moves at once are read together.
const reportCoalesce = 100 * time.Millisecond

// CircuitBreakerReconciler publishes the CircuitBreakers of a namespace into its
// fusebox-breakers ConfigMap and writes their status from the pods' BreakerReports.
// Requests are keyed by the ConfigMap (namespace/fusebox-breakers), whatever object
// triggered them.
//
// It runs as two controllers with queues of their own, one that publishes and one that
// writes status, so that a spec change or a fleet verdict never waits behind the status
// writes a burst of reports causes. Only this reconciler writes CircuitBreaker status.
type CircuitBreakerReconciler struct {
	client.Client
	// APIReader reads around the cache: a ConfigMap whose label was edited away, a pod the
	// cache has not seen yet.
	APIReader client.Reader
	Recorder  recorder.EventRecorder
	// Metrics, when set, receives every breaker's aggregated status.
	Metrics *Metrics
	// Clock says when overrides run out; nil means the wall clock. Tests set a fake one.
	Clock clock.PassiveClock
	// OperatorNamespace is where the node agents' pods run; empty means
	// DefaultOperatorNamespace.
	OperatorNamespace string
	// NodeAgentGrace is how long a node's reports keep counting after its agent stopped
	// being Ready; zero means DefaultNodeAgentGrace.
	NodeAgentGrace time.Duration

	// seen is when the operator first saw what each report claims (docs/design.md §5.12).
	seen firstSight
	// index holds each breaker's entries between reconciles.
	index entryIndex

	mu        sync.Mutex
	writes    map[client.ObjectKey]*writeRecord  // guarded by mu: each status's recent writes
	published map[string]time.Time               // guarded by mu: each namespace's last ConfigMap write
	overrides map[overrideKey]time.Time          // guarded by mu: when each override was first seen
	capped    map[client.ObjectKey]*cappedRecord // guarded by mu: each node report's PodNotOnNode Events

	// agentPods counts the pod cache's pods by agentPodsIndex; SetupWithManager sets it.
	agentPods *indexCounter
}

// +kubebuilder:rbac:groups=resilience.fusebox.dev,resources=circuitbreakers,verbs=get;list;watch
// +kubebuilder:rbac:groups=resilience.fusebox.dev,resources=circuitbreakers/status,verbs=get;patch
// +kubebuilder:rbac:groups=resilience.fusebox.dev,resources=breakerreports,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=resilience.fusebox.dev,resources=nodebreakerreports,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=list;watch;create
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;update;delete,resourceNames=fusebox-breakers
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch

// Reconcile is one full pass over the request's namespace, what the two controllers do
// between them: publish, then report.
func (r *CircuitBreakerReconciler) Reconcile(ctx context.Context, req reconcile.Request) (ctrl.Result, error) {
	if _, err := r.ReconcileConfig(ctx, req); err != nil {
		return ctrl.Result{}, err
	}
	return r.ReconcileStatus(ctx, req)
}

// ReconcileConfig renders every CircuitBreaker of the request's namespace, with the fleet
// verdicts its pods' reports make, and publishes the result in the namespace's ConfigMap.
// It writes nothing when nothing changed.
func (r *CircuitBreakerReconciler) ReconcileConfig(ctx context.Context, req reconcile.Request) (ctrl.Result, error) {
	log := logf.FromContext(ctx)
	breakers, cm, reports, _, err := r.read(ctx, req.Namespace, rendersFromReports)
	if err != nil {
		return ctrl.Result{}, err
	}
	plan := planConfig(r.now(), breakers, cm, reports, r.overrideSeen)
	if wait := r.publishWait(req.Namespace, cm, plan.data, plan.fleetOnly()); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	if err := r.publish(ctx, req.Namespace, cm, plan.data); err != nil {
		return ctrl.Result{}, err
	}
	for _, o := range plan.outcomes {
		switch {
		case o.err != nil:
			log.Error(o.err, "CircuitBreaker cannot be rendered; its last published config stays", "circuitBreaker", o.breaker.Name)
		case o.newGeneration:
			r.Recorder.Eventf(o.breaker, nil, corev1.EventTypeNormal, resiliencev1alpha1.ReasonConfigPublished, "Publish",
				"Published generation %d in ConfigMap %s", o.breaker.Generation, breakerconfig.ConfigMapName)
		}
	}
	// An override that runs out changes the rendered mode with no event to announce it.
	return ctrl.Result{RequeueAfter: nextExpiry(plan.outcomes)}, nil
}

// publishWait is how long to put off an update of the namespace's ConfigMap to data;
// zero to write now, which it then records. Updates of one namespace's ConfigMap are at
// least minWriteInterval apart: every pod of the namespace reads each one, and a pod
// flapping its report flapped the fleet verdict it publishes as fast. An update that
// changes nothing but the fleet counts (fleetOnly) waits minFleetInterval: the counts
// move with every pod's traffic report. The first change after a quiet interval goes out
// at once; the follow-ups are coalesced, and a write for any other cause carries the
// latest counts.
func (r *CircuitBreakerReconciler) publishWait(namespace string, cm *corev1.ConfigMap, data map[string]string, fleetOnly bool) time.Duration {
	if cm == nil || len(data) == 0 || maps.Equal(cm.Data, data) {
		return 0 // a create, a delete, or nothing to write
	}
	interval := minWriteInterval
	if fleetOnly {
		interval = minFleetInterval
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if wait := interval - time.Since(r.published[namespace]); wait > 0 {
		return wait
	}
	if r.published == nil {
		r.published = map[string]time.Time{}
	}
	r.published[namespace] = time.Now()
	return 0
}

// ReconcileStatus deletes the reports of pods that are gone and writes every breaker's
// status from what is published and what its pods report. It writes nothing when nothing
// changed.
func (r *CircuitBreakerReconciler) ReconcileStatus(ctx context.Context, req reconcile.Request) (ctrl.Result, error) {
	breakers, cm, reports, agentWait, err := r.read(ctx, req.Namespace, func([]resiliencev1alpha1.CircuitBreaker) bool { return true })
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.pruneReports(ctx, breakers, reports.gone); err != nil {
		return ctrl.Result{}, err
	}
	plan := planConfig(r.now(), breakers, cm, reports, r.overrideSeen)
	result := ctrl.Result{RequeueAfter: earliest(nextExpiry(plan.outcomes), agentWait)}
	result.RequeueAfter = earliest(result.RequeueAfter, r.recordCapped(ctx, req.Namespace, reports.capped))
	for _, o := range plan.outcomes {
		wait, err := r.updateStatus(ctx, o, reports.view(o.breaker))
		if err != nil {
			return ctrl.Result{}, err
		}
		result.RequeueAfter = earliest(result.RequeueAfter, wait)
	}
	r.forgetWrites(req.Namespace, breakers)
	r.forgetOverrides(req.Namespace, breakers)
	r.Metrics.forget(req.Namespace, breakers)
	return result, nil
}

// read returns the namespace's breakers, its published ConfigMap (nil if none) and, when
// needReports says the breakers need them, its pods' reports and when to read them again
// for a node agent's grace that ends (zero: no need).
func (r *CircuitBreakerReconciler) read(ctx context.Context, namespace string, needReports func([]resiliencev1alpha1.CircuitBreaker) bool) (
	[]resiliencev1alpha1.CircuitBreaker, *corev1.ConfigMap, namespaceReports, time.Duration, error) {
	var list resiliencev1alpha1.CircuitBreakerList
	if err := r.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return nil, nil, namespaceReports{}, 0, fmt.Errorf("list CircuitBreakers: %w", err)
	}
	cm, err := r.getConfigMap(ctx, namespace, len(list.Items) > 0)
	if err != nil {
		return nil, nil, namespaceReports{}, 0, err
	}
	reports := namespaceReports{}
	var wait time.Duration
	if len(list.Items) > 0 && needReports(list.Items) {
		if reports, wait, err = r.readReports(ctx, namespace, list.Items); err != nil {
			return nil, nil, namespaceReports{}, 0, err
		}
	}
	return list.Items, cm, reports, wait, nil
}

// rendersFromReports says whether any breaker's rendered config depends on its pods'
// reports: a fleet verdict (scope Fleet), the fleet counts (a retry budget or
// throttling), or each pod's share of a concurrency limit.
func rendersFromReports(breakers []resiliencev1alpha1.CircuitBreaker) bool {
	for i := range breakers {
		if breakers[i].Spec.Scope == resiliencev1alpha1.ScopeFleet || counting.UsesConcurrency(&breakers[i]) {
			return true
		}
	}
	return anyUsesTraffic(breakers)
}

// NewReconciler returns the reconciler wired to mgr's clients and event recorder; metrics
// may be nil.
func NewReconciler(mgr ctrl.Manager, metrics *Metrics) *CircuitBreakerReconciler {
	return &CircuitBreakerReconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Recorder:  mgr.GetEventRecorder(FieldOwner),
		Metrics:   metrics,
	}
}

// CacheByObject limits what the manager caches for the reconciler: of all ConfigMaps only
// the ones Fusebox publishes, and of every pod only what tells whether its report counts
// (trimPod), so the operator's memory does not grow with what the cluster's ConfigMaps
// and pod specs hold.
func CacheByObject() map[client.Object]cache.ByObject {
	return map[client.Object]cache.ByObject{
		&corev1.ConfigMap{}: {Label: labels.SelectorFromSet(labels.Set{
			breakerconfig.ManagedByLabel: breakerconfig.ManagedByValue,
		})},
		&corev1.Pod{}: {Transform: trimPod},
	}
}

// trimPod keeps of a pod what the reconciler reads: its name, namespace and UID (whose
// report it is), its node (which node's report may speak for it), its phase (whether it
// still runs), its labels (its revision, docs/design.md §10; whether it is a node agent;
// what the rollout gates select), its creation and deletion times, and whether it is
// wired to its node's agent (wiredToAgent). A node agent's pod keeps its Ready condition
// too (whether its node's report counts, agentCounted); no other pod's is read. The cache
// holds one trimmed pod per pod of the cluster, so it allocates nothing it can share: a
// wired pod's containers are wiredContainers, one slice for every such pod, which no one
// writes (the cache's readers get copies).
func trimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil // a tombstone
	}
	trimmed := &corev1.Pod{}
	trimmed.Namespace, trimmed.Name, trimmed.UID = pod.Namespace, pod.Name, pod.UID
	trimmed.ResourceVersion, trimmed.DeletionTimestamp = pod.ResourceVersion, pod.DeletionTimestamp
	trimmed.CreationTimestamp, trimmed.Labels = pod.CreationTimestamp, pod.Labels
	trimmed.Spec.NodeName = pod.Spec.NodeName
	trimmed.Status.Phase = pod.Status.Phase
	if ready := podReady(pod); ready != nil && hasNodeAgentLabels(pod) {
		trimmed.Status.Conditions = []corev1.PodCondition{{Type: ready.Type, Status: ready.Status, LastTransitionTime: ready.LastTransitionTime}}
	}
	if wiredToAgent(pod) {
		trimmed.Spec.Containers = wiredContainers
	}
	return trimmed, nil
}

// wiredContainers stands, in a trimmed pod, for the containers of a pod wired to its
// node's agent: one container with the agent's variable and no value.
var wiredContainers = []corev1.Container{{Name: "fusebox", Env: []corev1.EnvVar{{Name: breakerconfig.EnvNodeAgent}}}}

// SetupWithManager registers the two controllers. Every CircuitBreaker event and every
// event of a fusebox-breakers ConfigMap reconciles its namespace in both; BreakerReports
// and NodeBreakerReports reconcile both (the config controller renders fleet verdicts
// from them), the status controller a moment later so that a burst of them is read at
// once; pods that a report speaks for, when they appear, move, end or go, and node agents
// when their readiness changes, reconcile both, to count what counts and prune the
// reports of pods that are gone.
func (r *CircuitBreakerReconciler) SetupWithManager(mgr ctrl.Manager) error {
	pods, err := mgr.GetCache().GetInformer(context.Background(), &corev1.Pod{})
	if err != nil {
		return fmt.Errorf("the pod informer: %w", err)
	}
	if r.agentPods, err = newIndexCounter(pods, agentPodsIndex, agentPodsOf); err != nil {
		return fmt.Errorf("index pods by node and revision: %w", err)
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.Pod{}, agentNodeIndex, agentNodeOf); err != nil {
		return fmt.Errorf("index the node agents' pods by node: %w", err)
	}
	toNamespace := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return []reconcile.Request{namespaceRequest(o)}
	})
	isPublished := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetName() == breakerconfig.ConfigMapName
	})
	if err := ctrl.NewControllerManagedBy(mgr).
		Named("circuitbreaker-config").
		Watches(&resiliencev1alpha1.CircuitBreaker{}, toNamespace).
		Watches(&corev1.ConfigMap{}, toNamespace, builder.WithPredicates(isPublished)).
		Watches(&resiliencev1alpha1.BreakerReport{}, r.indexing(toNamespace)).
		Watches(&resiliencev1alpha1.NodeBreakerReport{}, r.indexing(toNamespace)).
		Watches(&corev1.Pod{}, r.podEvents()).
		Complete(reconcile.Func(r.ReconcileConfig)); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("circuitbreaker-status").
		Watches(&resiliencev1alpha1.CircuitBreaker{}, toNamespace).
		Watches(&corev1.ConfigMap{}, toNamespace, builder.WithPredicates(isPublished)).
		Watches(&resiliencev1alpha1.BreakerReport{}, r.indexing(coalesced(reportCoalesce))).
		Watches(&resiliencev1alpha1.NodeBreakerReport{}, r.indexing(coalesced(reportCoalesce))).
		Watches(&corev1.Pod{}, r.podEvents()).
		Complete(reconcile.Func(r.ReconcileStatus))
}

// namespaceRequest is the request of o's namespace.
func namespaceRequest(o client.Object) reconcile.Request {
	return namespaceKey(o.GetNamespace())
}

// namespaceKey is the request of that namespace.
func namespaceKey(namespace string) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: namespace, Name: breakerconfig.ConfigMapName}}
}
