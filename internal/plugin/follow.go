package plugin

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// follower keeps a view of a set of objects current: it lists them, hands the
// whole list to reset, then watches from the list's resourceVersion and hands
// each change to apply. When the watch ends (the server's timeout, 410 Gone,
// a broken connection) it lists again, so a reset after a gap loses nothing.
type follower struct {
	c       client.WithWatch
	newList func() client.ObjectList
	opts    client.ListOptions
	reset   func(items []runtime.Object)
	apply   func(watch.EventType, runtime.Object)
	// lost is told why the view went stale; it is current again at the next reset.
	lost func(error)
}

// maxRelistDelay caps the wait between failed lists.
const maxRelistDelay = 10 * time.Second

// run follows until ctx ends. An error of the first list (no such resource,
// no permission) is returned at once; later ones are retried.
func (f *follower) run(ctx context.Context) error {
	delay := 500 * time.Millisecond
	first := true
	for ctx.Err() == nil {
		rv, err := f.list(ctx)
		if err != nil {
			if first || ctx.Err() != nil {
				return err
			}
			f.lost(err)
			if !sleep(ctx, delay) {
				break
			}
			delay = min(2*delay, maxRelistDelay)
			continue
		}
		first, delay = false, 500*time.Millisecond
		if err := f.watch(ctx, rv); err != nil && ctx.Err() == nil {
			f.lost(err)
			sleep(ctx, delay)
		}
	}
	return nil
}

func (f *follower) list(ctx context.Context) (string, error) {
	list := f.newList()
	opts := f.opts
	if err := f.c.List(ctx, list, &opts); err != nil {
		return "", err
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return "", err
	}
	f.reset(items)
	return list.GetResourceVersion(), nil
}

// watch applies changes from rv on until the watch ends; nil when the server
// ended it in the ordinary way.
func (f *follower) watch(ctx context.Context, rv string) error {
	opts := f.opts
	raw := metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true}
	if opts.Raw != nil {
		raw = *opts.Raw
		raw.ResourceVersion, raw.AllowWatchBookmarks = rv, true
	}
	opts.Raw = &raw
	w, err := f.c.Watch(ctx, f.newList(), &opts)
	if err != nil {
		return err
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil
			}
			switch ev.Type {
			case watch.Bookmark:
			case watch.Error:
				if status := apierrors.FromObject(ev.Object); apierrors.IsResourceExpired(status) || apierrors.IsGone(status) {
					return nil
				}
				return fmt.Errorf("watch: %v", apierrors.FromObject(ev.Object))
			default:
				f.apply(ev.Type, ev.Object)
			}
		}
	}
}

// sleep waits d; false when ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
