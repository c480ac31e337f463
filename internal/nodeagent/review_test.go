package nodeagent

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"

	"k8s.io/utils/clock"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// TestTokenReviewOutlivesItsRequest: the requests that bring one token wait for one
// TokenReview of it, and a request that gives up before the answer leaves the answer
// kept, so that a pod asking again costs the API server nothing more. Without it, when
// 5,000 pods started at once on a slow API server in make bench-fleet, every retry
// began a review that was given up in its turn (docs/benchmarks.md, "Node
// agents").
func TestTokenReviewOutlivesItsRequest(t *testing.T) {
	t.Parallel()
	needEnv(t)
	node := newNode(t)
	ns := newNamespace(t)
	pod := newPod(t, ns, "checkout", node.Name)
	header := "Bearer " + podToken(t, pod, breakerconfig.NodeAgentAudience)
	a := newAuthenticator(clientset.AuthenticationV1().TokenReviews(), nil, clock.RealClock{})

	gaveUp, cancel := context.WithCancel(context.Background())
	cancel()
	var r *refusal
	if _, err := a.authenticate(gaveUp, header, true); err != nil && (!errors.As(err, &r) || r.status != http.StatusServiceUnavailable) {
		t.Fatalf("a request that gave up: %v, want 503", err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			id, err := a.authenticate(context.Background(), header, true)
			if err != nil || id.podUID != pod.UID {
				t.Errorf("authenticate: %+v, %v; want pod %s", id, err, pod.UID)
			}
		})
	}
	wg.Wait()
	if n := a.reviews.Load(); n != 1 {
		t.Errorf("one token, asked for by a request that gave up and then by 8 at once, cost %d TokenReviews, want 1", n)
	}
}
