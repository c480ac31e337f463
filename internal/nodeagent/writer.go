package nodeagent

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// nodeReports is the resource the agent writes.
var nodeReports = schema.GroupVersionResource{
	Group: breakerconfig.Group, Version: breakerconfig.Version, Resource: breakerconfig.NodeReportResource,
}

// FieldManager is the field manager of the agent's writes: managedFields names it as the
// writer of every node report.
const FieldManager = "fusebox-node"

// writeTimeout bounds one write, as the pods' own writes are bounded (pkg/breaker/kube):
// past the longest an API server queues a request, so a write it queued is answered
// rather than abandoned and sent again.
const writeTimeout = 30 * time.Second

// maxWriteAttempts bounds the requests of one write: a conflict or a create that finds
// the object costs one read and one more attempt, and a write that still fails is the
// book's to retry with backoff.
const maxWriteAttempts = 3

// objectWriter is where the node's reports go: the API server (apiWriter), or a test's
// record of the writes.
type objectWriter interface {
	// write makes obj's namespace's object say obj, the whole of it.
	write(ctx context.Context, obj *resiliencev1alpha1.NodeBreakerReport) error
	// remove deletes the namespace's object; one that does not exist is not an error.
	remove(ctx context.Context, namespace string) error
	// list returns the objects the field selector selects, in every namespace.
	list(ctx context.Context, fieldSelector string) ([]resiliencev1alpha1.NodeBreakerReport, error)
}

// apiWriter writes the node's reports by update, on the resourceVersion it last wrote or
// read, and creates the ones that do not exist. An update costs the API server about a
// quarter less than a server-side apply of the same object (docs/benchmarks.md): it has
// no applied configuration to merge, and the agent, the one writer of these objects,
// needs none. What others add to an object's metadata (labels, annotations, finalizers)
// is kept: their write moves the resourceVersion, the agent's next update conflicts, and
// it reads the object again before writing.
type apiWriter struct {
	reports dynamic.NamespaceableResourceInterface
	node    string

	mu     sync.Mutex
	stored map[string]storedMeta // guarded by mu: by namespace, the object as last written or read
}

// storedMeta is what the agent keeps of the object the API server holds.
type storedMeta struct {
	resourceVersion string
	labels          map[string]string
	annotations     map[string]string
	finalizers      []string
}

var _ objectWriter = (*apiWriter)(nil)

func newAPIWriter(reports dynamic.NamespaceableResourceInterface, node string) *apiWriter {
	return &apiWriter{reports: reports, node: node, stored: map[string]storedMeta{}}
}

func (w *apiWriter) write(ctx context.Context, obj *resiliencev1alpha1.NodeBreakerReport) error {
	namespace := obj.Namespace
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	reports := w.reports.Namespace(namespace)
	w.mu.Lock()
	meta, known := w.stored[namespace]
	w.mu.Unlock()
	var err error
	for range maxWriteAttempts {
		var got *unstructured.Unstructured
		if !known {
			got, err = create(ctx, reports, obj)
		} else {
			got, err = update(ctx, reports, obj, meta)
		}
		switch {
		case err == nil:
			w.remember(namespace, got)
			return nil
		case known && apierrors.IsNotFound(err):
			known = false // deleted under the agent (its Node's garbage collection, a person)
			continue
		case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err):
			// Written or created by another meanwhile: read what it holds, and write again.
		default:
			return err
		}
		cur, gerr := reports.Get(ctx, w.node, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(gerr):
			known = false
		case gerr != nil:
			return gerr
		default:
			meta, known = metaOf(cur), true
		}
	}
	w.forget(namespace)
	return err
}

func create(ctx context.Context, reports dynamic.ResourceInterface, obj *resiliencev1alpha1.NodeBreakerReport) (*unstructured.Unstructured, error) {
	u, err := toUnstructured(obj)
	if err != nil {
		return nil, err
	}
	return reports.Create(ctx, u, metav1.CreateOptions{FieldManager: FieldManager})
}

func update(ctx context.Context, reports dynamic.ResourceInterface, obj *resiliencev1alpha1.NodeBreakerReport, meta storedMeta) (*unstructured.Unstructured, error) {
	obj = obj.DeepCopy()
	obj.ResourceVersion = meta.resourceVersion
	obj.Labels, obj.Annotations, obj.Finalizers = meta.labels, meta.annotations, meta.finalizers
	u, err := toUnstructured(obj)
	if err != nil {
		return nil, err
	}
	return reports.Update(ctx, u, metav1.UpdateOptions{FieldManager: FieldManager})
}

// toUnstructured is the typed object as the dynamic client sends it.
func toUnstructured(obj *resiliencev1alpha1.NodeBreakerReport) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: m}, nil
}

func metaOf(u *unstructured.Unstructured) storedMeta {
	return storedMeta{resourceVersion: u.GetResourceVersion(), labels: u.GetLabels(), annotations: u.GetAnnotations(), finalizers: u.GetFinalizers()}
}

func (w *apiWriter) remember(namespace string, u *unstructured.Unstructured) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stored[namespace] = metaOf(u)
}

func (w *apiWriter) forget(namespace string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.stored, namespace)
}

func (w *apiWriter) remove(ctx context.Context, namespace string) error {
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	err := w.reports.Namespace(namespace).Delete(ctx, w.node, metav1.DeleteOptions{})
	if err == nil || apierrors.IsNotFound(err) {
		w.forget(namespace)
		return nil
	}
	return err
}

func (w *apiWriter) list(ctx context.Context, fieldSelector string) ([]resiliencev1alpha1.NodeBreakerReport, error) {
	l, err := w.reports.List(ctx, metav1.ListOptions{FieldSelector: fieldSelector})
	if err != nil {
		return nil, err
	}
	out := make([]resiliencev1alpha1.NodeBreakerReport, len(l.Items))
	for i := range l.Items {
		item := &l.Items[i]
		w.remember(item.GetNamespace(), item)
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(item.Object, &out[i]); err != nil {
			return nil, fmt.Errorf("NodeBreakerReport %s/%s: %w", item.GetNamespace(), item.GetName(), err)
		}
	}
	return out, nil
}

// object is the NodeBreakerReport of namespace that says entries, owned by the Node of uid
// owner.
func (b *book) object(namespace string, entries []resiliencev1alpha1.NodeBreakerEntry, owner types.UID) *resiliencev1alpha1.NodeBreakerReport {
	return &resiliencev1alpha1.NodeBreakerReport{
		TypeMeta: metav1.TypeMeta{APIVersion: nodeReports.GroupVersion().String(), Kind: breakerconfig.NodeReportKind},
		ObjectMeta: metav1.ObjectMeta{
			Name:      b.node,
			Namespace: namespace,
			// The garbage collector deletes the report with its Node; the admission policy
			// checks that the agent names its own node here.
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: b.node, UID: owner}},
		},
		NodeName: b.node,
		Breakers: entries,
	}
}
