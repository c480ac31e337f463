package plugin

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// follower keeps a view of a set of objects current. It runs a client-go
// informer rather than a list+watch loop of its own: the informer's reflector
// already resumes a watch the server ended, lists again when the
// resourceVersion it held has expired (410 Gone) or is too large for a
// restarted server, backs off between failures, and turns what changed
// across the gap into adds, updates and deletes.
type follower struct {
	// lw lists and watches the objects; listWatch builds it from a client.
	lw cache.ListerWatcher
	// example is an object of the kind followed (the informer's type check).
	example runtime.Object
	apply   func(watch.EventType, runtime.Object)
	// lost is told why the view may be behind the cluster.
	lost func(error)
	// current is called once the view holds every object: after the first
	// list, and again each time a watch starts after one was lost.
	current func()
}

// listWatch lists and watches newList's kind with c, within opts (a
// namespace, a field selector).
func listWatch(c client.WithWatch, newList func() client.ObjectList, opts client.ListOptions) *cache.ListWatch {
	with := func(raw metav1.ListOptions) *client.ListOptions {
		o := opts
		if o.FieldSelector != nil {
			raw.FieldSelector = o.FieldSelector.String()
		}
		// controller-runtime copies Limit and Continue over the raw options
		// of a list: carry the reflector's paging through them.
		o.Limit, o.Continue, o.FieldSelector, o.Raw = raw.Limit, raw.Continue, nil, &raw
		return &o
	}
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, raw metav1.ListOptions) (runtime.Object, error) {
			list := newList()
			if err := c.List(ctx, list, with(raw)); err != nil {
				return nil, err
			}
			return list, nil
		},
		WatchFuncWithContext: func(ctx context.Context, raw metav1.ListOptions) (watch.Interface, error) {
			return c.Watch(ctx, newList(), with(raw))
		},
	}
}

// run follows until ctx ends. An error before the first complete list (no
// such resource, no permission) is returned at once; later ones are the
// informer's to retry, and lost hears of them.
func (f *follower) run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The informer logs through the context's logger, by default klog on the
	// user's terminal, even as it stops; what the user needs to know reaches
	// lost instead.
	ctx = logr.NewContext(ctx, logr.Discard())
	lost := make(chan struct{}, 1)
	lw := &watchStarts{ListerWatcher: f.lw, started: func() {
		select {
		case <-lost:
			f.current()
		default:
		}
	}}
	informer := cache.NewSharedIndexInformerWithOptions(lw, f.example, cache.SharedIndexInformerOptions{})
	firstErr := make(chan error, 1)
	if err := informer.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		if !informer.HasSynced() {
			select {
			case firstErr <- err:
			default:
			}
			return
		}
		select {
		case lost <- struct{}{}:
		default:
		}
		f.lost(err)
	}); err != nil {
		return err
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { f.applyObject(watch.Added, obj) },
		UpdateFunc: func(_, obj any) { f.applyObject(watch.Modified, obj) },
		DeleteFunc: func(obj any) {
			// A delete missed during a gap comes as its last known state.
			if gone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = gone.Obj
			}
			f.applyObject(watch.Deleted, obj)
		},
	}); err != nil {
		return err
	}
	go informer.RunWithContext(ctx)

	synced := make(chan bool, 1)
	go func() { synced <- cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) }()
	select {
	case err := <-firstErr:
		return fmt.Errorf("listing: %w", err)
	case ok := <-synced:
		if !ok {
			return nil // ctx ended first
		}
	}
	f.current()
	<-ctx.Done()
	return nil
}

func (f *follower) applyObject(t watch.EventType, obj any) {
	if o, ok := obj.(runtime.Object); ok {
		f.apply(t, o)
	}
}

// watchStarts tells started each time a watch is established, which is when
// a view that was lost is being caught up again.
type watchStarts struct {
	cache.ListerWatcher
	started func()
}

func (w *watchStarts) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	wi, err := cache.ToListerWatcherWithContext(w.ListerWatcher).WatchWithContext(ctx, opts)
	if err == nil {
		w.started()
	}
	return wi, err
}

func (w *watchStarts) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	return cache.ToListerWatcherWithContext(w.ListerWatcher).ListWithContext(ctx, opts)
}
