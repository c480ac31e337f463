package plugin

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/testutil"
)

// expiringWatches hands the informer a watch that the real API server
// refuses as expired (it asks for resourceVersion 1, long compacted away from
// the watch cache) when told to, after running gap: what happens to the
// cluster while a watch is down.
type expiringWatches struct {
	*cache.ListWatch

	mu      sync.Mutex
	current watch.Interface
	expire  func() // the gap; nil when the next watch is an ordinary one
	expired []error
}

func (e *expiringWatches) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	e.mu.Lock()
	gap := e.expire
	e.expire = nil
	e.mu.Unlock()
	if gap != nil {
		gap()
		opts.ResourceVersion, opts.ResourceVersionMatch, opts.SendInitialEvents = "1", "", nil
	}
	w, err := e.ListWatch.WatchWithContext(ctx, opts)
	if err != nil {
		e.note(err)
		return nil, err
	}
	w = watch.Filter(w, func(ev watch.Event) (watch.Event, bool) {
		if ev.Type == watch.Error {
			e.note(apierrors.FromObject(ev.Object))
		}
		return ev, true
	})
	e.mu.Lock()
	e.current = w
	e.mu.Unlock()
	return w, nil
}

func (e *expiringWatches) note(err error) {
	if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
		e.mu.Lock()
		e.expired = append(e.expired, err)
		e.mu.Unlock()
	}
}

// endWatch ends the watch in progress, as a server or a network does; the
// next one runs gap first and then asks for an expired resourceVersion.
func (e *expiringWatches) endWatch(gap func()) {
	e.mu.Lock()
	e.expire = gap
	w := e.current
	e.mu.Unlock()
	w.Stop()
}

// followed is a follower's view: the names it holds, and whether it is whole.
type followed struct {
	mu      sync.Mutex
	names   map[string]bool
	current int
	lost    []error
}

func (v *followed) String() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	var ns []string
	for n := range v.names {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	return strings.Join(ns, ",")
}

// A watch that cannot resume because its resourceVersion expired (410 Gone)
// does not end the view: the follower lists again, and what changed in the
// gap (a breaker deleted, one created) reaches the view as a delete and an add.
func TestFollowerSurvivesExpiredResourceVersion(t *testing.T) {
	ns := newNamespace(t, "")
	createBreaker(t, ns, "before", nil)
	o := &Options{Flags: genericclioptions.NewConfigFlags(false)}
	o.Flags.KubeConfig = &kubeconfig
	c, err := o.client()
	if err != nil {
		t.Fatal(err)
	}
	lw := &expiringWatches{ListWatch: listWatch(c, func() client.ObjectList { return &resiliencev1alpha1.CircuitBreakerList{} }, client.ListOptions{Namespace: ns})}
	v := &followed{names: map[string]bool{}}
	f := &follower{
		lw:      lw,
		example: &resiliencev1alpha1.CircuitBreaker{},
		apply: func(typ watch.EventType, obj runtime.Object) {
			cb := obj.(*resiliencev1alpha1.CircuitBreaker)
			v.mu.Lock()
			defer v.mu.Unlock()
			v.names[cb.Name] = typ != watch.Deleted
			if typ == watch.Deleted {
				delete(v.names, cb.Name)
			}
		},
		lost: func(err error) {
			v.mu.Lock()
			defer v.mu.Unlock()
			v.lost = append(v.lost, err)
		},
		current: func() {
			v.mu.Lock()
			defer v.mu.Unlock()
			v.current++
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- f.run(ctx) }()
	holds := func(want string) {
		t.Helper()
		testutil.Eventually(t, wait, "the view holds "+want, func() error {
			if got := v.String(); got != want {
				return fmt.Errorf("it holds %q", got)
			}
			return nil
		})
	}
	holds("before")
	createBreaker(t, ns, "after", nil)
	holds("after,before")

	lw.endWatch(func() {
		if err := k8sClient.Delete(context.Background(), getBreaker(t, ns, "before")); err != nil {
			t.Error(err)
		}
		createBreaker(t, ns, "during", nil)
	})
	holds("after,during")
	lw.mu.Lock()
	expired := lw.expired
	lw.mu.Unlock()
	if len(expired) == 0 {
		t.Errorf("the API server never refused the watch as expired: the test proved nothing")
	}
	t.Logf("refused as %v; lost: %v", expired, v.lost)

	createBreaker(t, ns, "later", nil)
	holds("after,during,later")
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("follower ended with %v, want nil on cancel", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("follower did not end within 10s of its context")
	}
}

// An error before the view exists (here: a kind the server does not serve)
// is the command's error at once, not a retry forever.
func TestFollowerReturnsFirstListError(t *testing.T) {
	needEnv(t)
	o := &Options{Flags: genericclioptions.NewConfigFlags(false)}
	o.Flags.KubeConfig = &kubeconfig
	c, err := o.client()
	if err != nil {
		t.Fatal(err)
	}
	f := &follower{
		// A field the server does not select on: refused on every attempt.
		lw: listWatch(c, func() client.ObjectList { return &resiliencev1alpha1.CircuitBreakerList{} },
			client.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.mode", "Enforce")}),
		example: &resiliencev1alpha1.CircuitBreaker{},
		apply:   func(watch.EventType, runtime.Object) {},
		lost:    func(error) {},
		current: func() {},
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	err = f.run(ctx)
	if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "spec.mode") {
		t.Errorf("run: %v (context %v), want the server's refusal of the field selector", err, ctx.Err())
	}
}
