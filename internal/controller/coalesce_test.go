package controller

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// The first report after a quiet spell is reconciled at once; the reports that follow
// within the coalescing delay are read together by one reconcile, delay after it.
func TestCoalescedLeadsThenBatches(t *testing.T) {
	const delay = 100 * time.Millisecond
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	h := coalesced(delay)
	report := func() {
		h.Update(context.Background(), event.UpdateEvent{ObjectNew: &resiliencev1alpha1.BreakerReport{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "pod"}}}, q)
	}
	take := func() time.Duration {
		t.Helper()
		start := time.Now()
		item, shutdown := q.Get()
		if shutdown {
			t.Fatal("queue shut down")
		}
		q.Done(item)
		q.Forget(item)
		return time.Since(start)
	}

	first := time.Now()
	report()
	if n := q.Len(); n != 1 {
		t.Fatalf("after the first report the queue holds %d, want the namespace at once", n)
	}
	take()
	// A burst right behind it: one reconcile, a delay after the first.
	for range 5 {
		report()
	}
	if n := q.Len(); n != 0 {
		t.Fatalf("the burst was queued at once (%d), want it held for the next reconcile", n)
	}
	take()
	if got := time.Since(first); got < delay-10*time.Millisecond {
		t.Errorf("the burst's reconcile came %v after the first, want about %v", got, delay)
	}
	if n := q.Len(); n != 0 {
		t.Errorf("the burst started %d more reconciles, want none", n+1)
	}
	// Quiet for a delay: the next report is news again.
	time.Sleep(delay + 10*time.Millisecond)
	report()
	if n := q.Len(); n != 1 {
		t.Errorf("after a quiet spell the queue holds %d, want the namespace at once", n)
	}
}
