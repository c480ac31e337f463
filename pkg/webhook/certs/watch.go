package certs

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// watchNamed sends handler the changes of the one object of resource named
// name (in namespace, or cluster-scoped when namespace is empty) until ctx is
// done or stop is called; stop waits for the watch's goroutines. It watches
// that object alone (a metadata.name field selector), so RBAC can grant it by
// resourceNames.
func watchNamed(ctx context.Context, client kubernetes.Interface, resource schema.GroupVersionResource, namespace, name string, handler cache.ResourceEventHandler) (stop func(), err error) {
	f := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		}))
	informer, err := f.ForResource(resource)
	if err != nil {
		return nil, fmt.Errorf("certs: watch %s: %w", resource.Resource, err)
	}
	if _, err := informer.Informer().AddEventHandler(handler); err != nil {
		return nil, fmt.Errorf("certs: watch %s: %w", resource.Resource, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	f.StartWithContext(ctx)
	return func() {
		cancel()
		f.Shutdown()
	}, nil
}
