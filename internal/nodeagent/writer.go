package nodeagent

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// nodeReports is the resource the agent writes.
var nodeReports = schema.GroupVersionResource{
	Group: breakerconfig.Group, Version: breakerconfig.Version, Resource: breakerconfig.NodeReportResource,
}

// FieldManager is the server-side apply field manager of the agent's writes. It owns every
// line and entry, so that what a pod stops reporting is removed.
const FieldManager = "fusebox-node"

// writeTimeout bounds one write, as the pods' own writes are bounded (pkg/breaker/kube):
// past the longest an API server queues a request, so a write it queued is answered
// rather than abandoned and sent again.
const writeTimeout = 30 * time.Second

// objectWriter is where the node's reports go: the API server (apiWriter), or a test's
// record of the writes.
type objectWriter interface {
	// apply writes the namespace's object, the whole of it.
	apply(ctx context.Context, namespace string, obj nodeReportObject) error
	// remove deletes the namespace's object; one that does not exist is not an error.
	remove(ctx context.Context, namespace string) error
	// list returns the objects the field selector selects, in every namespace.
	list(ctx context.Context, fieldSelector string) ([]nodeReportObject, error)
}

// apiWriter writes the node's reports by server-side apply.
type apiWriter struct {
	reports dynamic.NamespaceableResourceInterface
	node    string
}

var _ objectWriter = (*apiWriter)(nil)

func (w *apiWriter) apply(ctx context.Context, namespace string, obj nodeReportObject) error {
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	body, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	force := true
	_, err = w.reports.Namespace(namespace).Patch(ctx, w.node, types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: FieldManager, Force: &force})
	return err
}

func (w *apiWriter) remove(ctx context.Context, namespace string) error {
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	err := w.reports.Namespace(namespace).Delete(ctx, w.node, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func (w *apiWriter) list(ctx context.Context, fieldSelector string) ([]nodeReportObject, error) {
	l, err := w.reports.List(ctx, metav1.ListOptions{FieldSelector: fieldSelector})
	if err != nil {
		return nil, err
	}
	out := make([]nodeReportObject, 0, len(l.Items))
	for _, item := range l.Items {
		raw, err := json.Marshal(item.Object)
		if err != nil {
			return nil, err
		}
		var o nodeReportObject
		if err := json.Unmarshal(raw, &o); err != nil {
			return nil, fmt.Errorf("NodeBreakerReport %s/%s: %w", item.GetNamespace(), item.GetName(), err)
		}
		out = append(out, o)
	}
	return out, nil
}

// object is the NodeBreakerReport of namespace holding lines, owned by the Node of uid
// owner; its pods in name order, so equal reports are equal bodies.
func (b *book) object(namespace string, lines map[types.UID]line, owner types.UID) nodeReportObject {
	o := nodeReportObject{
		APIVersion: nodeReports.GroupVersion().String(),
		Kind:       breakerconfig.NodeReportKind,
		Metadata: nodeReportMeta{
			Name:      b.node,
			Namespace: namespace,
			// The garbage collector deletes the report with its Node; the admission
			// policy checks that the agent names its own node here.
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: b.node, UID: owner}},
		},
		NodeName: b.node,
		Pods:     make([]nodeReportLine, 0, len(lines)),
	}
	for uid, l := range lines {
		o.Pods = append(o.Pods, nodeReportLine{Name: l.pod, UID: uid, Breakers: l.entries})
	}
	slices.SortFunc(o.Pods, func(a, b nodeReportLine) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return strings.Compare(string(a.UID), string(b.UID))
	})
	return o
}
