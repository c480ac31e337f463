package nodeagent

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/clock"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// podIndex is the agent's cache of the pods bound to its node: an informer whose list and
// watch are field-selected on spec.nodeName, so the API server sends the agent its own
// node's pods and nothing else (its role could list every pod of the cluster: the
// selector, not RBAC, keeps it to its node, docs/rbac.md), each trimmed to what the
// agent judges and counts by (name, UID, node, phase, the revision labels, and whether
// it is wired to the agent), so a node's worth of pods costs little memory.
type podIndex struct {
	node     string
	client   kubernetes.Interface
	informer cache.SharedIndexInformer
	clock    clock.PassiveClock
	// gone is told of a pod that left the node (deleted, or finished): its line goes.
	gone func(namespace string, uid types.UID)
	// relabelled is told of a pod whose revision may have changed (relabelled, or just
	// arrived in the cache): the entry it counts in moves if it did.
	relabelled func(namespace string, uid types.UID)

	// limiter bounds the reads around the cache (a pod whose watch event is still on its
	// way), and missing remembers, per UID, a pod such a read found not to exist: a token
	// of a deleted pod, which the API server still vouches for until it expires, costs one
	// read a minute, not one per request.
	limiter flowcontrol.RateLimiter
	mu      sync.Mutex
	missing map[types.UID]time.Time // guarded by mu: when the read found none

	liveLookups atomic.Int64
}

// Bounds of the reads around the agent's pod cache.
const (
	// missingFor is how long a pod a live read found missing is believed missing.
	missingFor = time.Minute
	// maxMissing bounds how many such pods are remembered.
	maxMissing = 4096
	// liveLookupsPerSecond and liveLookupBurst bound the reads themselves, whatever the
	// UIDs: a node binds a few pods a second at most.
	liveLookupsPerSecond = 5
	liveLookupBurst      = 20
)

const byUID = "uid"

func newPodIndex(cs kubernetes.Interface, node string, clk clock.PassiveClock, gone, relabelled func(string, types.UID)) *podIndex {
	lw := cache.NewFilteredListWatchFromClient(cs.CoreV1().RESTClient(), "pods", metav1.NamespaceAll, func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
	})
	inf := cache.NewSharedIndexInformerWithOptions(lw, &corev1.Pod{}, cache.SharedIndexInformerOptions{
		Indexers: cache.Indexers{
			byUID: func(obj any) ([]string, error) {
				if p, ok := obj.(*corev1.Pod); ok {
					return []string{string(p.UID)}, nil
				}
				return nil, nil
			},
			cache.NamespaceIndex: cache.MetaNamespaceIndexFunc,
		},
	})
	_ = inf.SetTransform(trimPod)
	p := &podIndex{
		node: node, client: cs, informer: inf, clock: clk, gone: gone, relabelled: relabelled,
		limiter: flowcontrol.NewTokenBucketRateLimiter(liveLookupsPerSecond, liveLookupBurst),
		missing: map[types.UID]time.Time{},
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		// A pod whose report came before its watch event (the agent read it around the
		// cache) was counted at no revision: it has one now.
		AddFunc: func(obj any) {
			if pod, ok := obj.(*corev1.Pod); ok {
				p.relabelled(pod.Namespace, pod.UID)
			}
		},
		UpdateFunc: func(oldObj, obj any) {
			pod, ok := obj.(*corev1.Pod)
			if !ok {
				return
			}
			if finished(pod) {
				p.gone(pod.Namespace, pod.UID)
				return
			}
			if old, ok := oldObj.(*corev1.Pod); ok && resiliencev1alpha1.RevisionOf(old.Labels) != resiliencev1alpha1.RevisionOf(pod.Labels) {
				p.relabelled(pod.Namespace, pod.UID)
			}
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				p.gone(pod.Namespace, pod.UID)
			}
		},
	})
	return p
}

// trimPod keeps of a pod what the agent judges and counts by: its revision labels, and, as
// one container with the variable and no value, whether it is wired to the agent.
func trimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	trimmed := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID, ResourceVersion: pod.ResourceVersion},
		Spec:       corev1.PodSpec{NodeName: pod.Spec.NodeName},
		Status:     corev1.PodStatus{Phase: pod.Status.Phase},
	}
	for _, label := range resiliencev1alpha1.RevisionLabels {
		if v, ok := pod.Labels[label]; ok {
			if trimmed.Labels == nil {
				trimmed.Labels = map[string]string{}
			}
			trimmed.Labels[label] = v
		}
	}
	if wiredToAgent(pod) {
		trimmed.Spec.Containers = []corev1.Container{{Name: "fusebox", Env: []corev1.EnvVar{{Name: breakerconfig.EnvNodeAgent}}}}
	}
	return trimmed, nil
}

// wiredToAgent reports whether a pod reports through its node's agent: one of its
// containers has FUSEBOX_NODE_AGENT, as the pod webhook wires it.
func wiredToAgent(pod *corev1.Pod) bool {
	has := func(cs []corev1.Container) bool {
		return slices.ContainsFunc(cs, func(c corev1.Container) bool {
			return slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == breakerconfig.EnvNodeAgent })
		})
	}
	return has(pod.Spec.Containers) || has(pod.Spec.InitContainers)
}

// finished reports whether a pod's containers have all stopped for good: its report
// counts for nothing any more (docs/design.md §5.12).
func finished(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

func (p *podIndex) run(ctx context.Context) { p.informer.RunWithContext(ctx) }

func (p *podIndex) synced() bool { return p.informer.HasSynced() }

// cached returns the pod of uid from the cache, if it has it.
func (p *podIndex) cached(uid types.UID) (*corev1.Pod, bool) {
	objs, err := p.informer.GetIndexer().ByIndex(byUID, string(uid))
	if err != nil || len(objs) == 0 {
		return nil, false
	}
	pod, ok := objs[0].(*corev1.Pod)
	return pod, ok
}

// revision is the revision of the pod of uid, as its labels in the cache say.
func (p *podIndex) revision(uid types.UID) string {
	if pod, ok := p.cached(uid); ok {
		return resiliencev1alpha1.RevisionOf(pod.Labels)
	}
	return ""
}

// wired returns the UIDs of the running pods of namespace wired to the agent.
func (p *podIndex) wired(namespace string) []types.UID {
	objs, err := p.informer.GetIndexer().ByIndex(cache.NamespaceIndex, namespace)
	if err != nil {
		return nil
	}
	var out []types.UID
	for _, o := range objs {
		if pod, ok := o.(*corev1.Pod); ok && !finished(pod) && wiredToAgent(pod) {
			out = append(out, pod.UID)
		}
	}
	return out
}

// bound returns nil if id's pod is bound to the node and running, or a refusal saying why
// not: 403, or 503 when the API server cannot be asked (or the agent's reads around its
// cache are spent for the moment). A pod the cache has not seen (its watch event still on
// its way, moments after it was bound) is read from the API server before it is refused,
// and a pod found missing that way is refused from memory for a minute.
func (p *podIndex) bound(ctx context.Context, id identity) error {
	pod, ok := p.cached(id.podUID)
	if !ok {
		live, err := p.live(ctx, id)
		if err != nil {
			return err
		}
		pod = live
	}
	switch {
	case pod.Namespace != id.namespace || pod.Name != id.pod:
		return refuse(http.StatusForbidden, "the token names pod %s, but uid %s is pod %s/%s", id, id.podUID, pod.Namespace, pod.Name)
	case pod.Spec.NodeName != p.node:
		return refuse(http.StatusForbidden, "pod %s is bound to node %q, not to this agent's node %s", id, pod.Spec.NodeName, p.node)
	case finished(pod):
		return refuse(http.StatusForbidden, "pod %s has finished (phase %s): its breakers count for nothing any more", id, pod.Status.Phase)
	}
	return nil
}

// live reads id's pod around the cache, within the bounds above.
func (p *podIndex) live(ctx context.Context, id identity) (*corev1.Pod, error) {
	now := p.clock.Now()
	p.mu.Lock()
	at, missing := p.missing[id.podUID]
	p.mu.Unlock()
	if missing && now.Sub(at) < missingFor {
		return nil, refuse(http.StatusForbidden, "pod %s (uid %s) is not bound to node %s: there is no such pod", id, id.podUID, p.node)
	}
	if !p.limiter.TryAccept() {
		return nil, refuse(http.StatusServiceUnavailable, "cannot check that pod %s is bound to node %s now: too many pods unknown to the agent's cache; ask again shortly", id, p.node)
	}
	p.liveLookups.Add(1)
	live, err := p.client.CoreV1().Pods(id.namespace).Get(ctx, id.pod, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) || (err == nil && live.UID != id.podUID):
		p.remember(id.podUID, now)
		if err == nil {
			return nil, refuse(http.StatusForbidden, "pod %s (uid %s) is not bound to node %s: that name is now pod uid %s", id, id.podUID, p.node, live.UID)
		}
		return nil, refuse(http.StatusForbidden, "pod %s (uid %s) is not bound to node %s: there is no such pod", id, id.podUID, p.node)
	case err != nil:
		return nil, refuse(http.StatusServiceUnavailable, "cannot check that pod %s is bound to node %s: %v", id, p.node, err)
	}
	return live, nil
}

// remember notes that no pod of uid exists, as of now.
func (p *podIndex) remember(uid types.UID, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.missing) >= maxMissing {
		for u, at := range p.missing {
			if now.Sub(at) >= missingFor || len(p.missing) >= maxMissing {
				delete(p.missing, u)
			}
		}
	}
	p.missing[uid] = now
}
