package nodeagent

import (
	"context"
	"net/http"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// podIndex is the agent's cache of the pods bound to its node: an informer whose list and
// watch are field-selected on spec.nodeName, so the API server sends the agent its own
// node's pods and nothing else, each trimmed to what the agent judges by (name, UID, node,
// phase), so a node's worth of pods costs little memory.
type podIndex struct {
	node     string
	client   kubernetes.Interface
	informer cache.SharedIndexInformer
	// gone is told of a pod that left the node (deleted, or finished): its lines go.
	gone func(namespace string, uid types.UID)

	liveLookups atomic.Int64
}

const byUID = "uid"

func newPodIndex(cs kubernetes.Interface, node string, gone func(string, types.UID)) *podIndex {
	lw := cache.NewFilteredListWatchFromClient(cs.CoreV1().RESTClient(), "pods", metav1.NamespaceAll, func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
	})
	inf := cache.NewSharedIndexInformerWithOptions(lw, &corev1.Pod{}, cache.SharedIndexInformerOptions{
		Indexers: cache.Indexers{byUID: func(obj any) ([]string, error) {
			if p, ok := obj.(*corev1.Pod); ok {
				return []string{string(p.UID)}, nil
			}
			return nil, nil
		}},
	})
	_ = inf.SetTransform(trimPod)
	p := &podIndex{node: node, client: cs, informer: inf, gone: gone}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) {
			if pod, ok := obj.(*corev1.Pod); ok && finished(pod) {
				p.gone(pod.Namespace, pod.UID)
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

// trimPod keeps of a pod what the agent judges by.
func trimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID, ResourceVersion: pod.ResourceVersion},
		Spec:       corev1.PodSpec{NodeName: pod.Spec.NodeName},
		Status:     corev1.PodStatus{Phase: pod.Status.Phase},
	}, nil
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

// boundNow reports whether the cache holds a running pod of uid in namespace: the
// read-back keeps the lines of those pods only.
func (p *podIndex) boundNow(namespace string, uid types.UID) bool {
	pod, ok := p.cached(uid)
	return ok && pod.Namespace == namespace && !finished(pod)
}

// bound returns nil if id's pod is bound to the node and running, or a refusal saying why
// not: 403, or 503 when the API server cannot be asked. A pod the cache has not seen
// (its watch event still on its way, moments after it was bound) is read from the API
// server before it is refused.
func (p *podIndex) bound(ctx context.Context, id identity) error {
	pod, ok := p.cached(id.podUID)
	if !ok {
		p.liveLookups.Add(1)
		live, err := p.client.CoreV1().Pods(id.namespace).Get(ctx, id.pod, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return refuse(http.StatusForbidden, "pod %s (uid %s) is not bound to node %s: there is no such pod", id, id.podUID, p.node)
		case err != nil:
			return refuse(http.StatusServiceUnavailable, "cannot check that pod %s is bound to node %s: %v", id, p.node, err)
		case live.UID != id.podUID:
			return refuse(http.StatusForbidden, "pod %s (uid %s) is not bound to node %s: that name is now pod uid %s", id, id.podUID, p.node, live.UID)
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
