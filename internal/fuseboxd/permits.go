package fuseboxd

import (
	"container/heap"
	"context"
	"crypto/rand"
	"sync"
	"time"
)

// permit is one admitted call whose outcome the client has yet to report.
type permit struct {
	id      string
	done    func(error)
	expires time.Time // on the monotonic clock (time.Now)
	index   int       // in the expiry heap; -1 once out of it
}

// permits holds the outstanding permits by id, and by expiry so that lapsed ones are
// dropped without scanning them all.
type permits struct {
	mu     sync.Mutex
	byID   map[string]*permit
	expiry expiryHeap
	max    int
	closed bool // shutting down: no new permits
}

func newPermits(limit int) *permits {
	return &permits{byID: make(map[string]*permit), max: limit}
}

// add stores done under a new id until lease has passed. It reports false, and stores
// nothing, when max permits are outstanding or the table is closed; the caller must then
// settle done itself.
func (t *permits) add(done func(error), lease time.Duration, now time.Time) (string, bool) {
	// 128 random bits: ids are not guessable by another client of the socket, and never
	// collide with a permit settled earlier.
	id := rand.Text()
	p := &permit{id: id, done: done, expires: now.Add(lease)}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || len(t.byID) >= t.max {
		return "", false
	}
	t.byID[id] = p
	heap.Push(&t.expiry, p)
	return id, true
}

// take removes and returns the done of the permit id, if it is outstanding.
func (t *permits) take(id []byte) (func(error), bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p, ok := t.byID[string(id)]
	if !ok {
		return nil, false
	}
	delete(t.byID, p.id)
	heap.Remove(&t.expiry, p.index)
	return p.done, true
}

// expire drops every permit whose lease has passed at now, and returns how many. Their
// done is never called: the breaker treats them as calls that never finished (§5.3).
func (t *permits) expire(now time.Time) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for len(t.expiry) > 0 && !t.expiry[0].expires.After(now) {
		p := heap.Pop(&t.expiry).(*permit)
		delete(t.byID, p.id)
		n++
	}
	if n > 0 && len(t.byID) == 0 {
		// A map keeps its buckets after a burst of leaks; start afresh so that the
		// memory goes back too.
		t.byID, t.expiry = make(map[string]*permit), nil
	}
	return n
}

// len is how many permits are outstanding.
func (t *permits) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byID)
}

// close refuses new permits and settles every outstanding one as ignored: the daemon is
// going away, which says nothing about the dependency (a cancelled call, §5.6).
func (t *permits) close() int {
	t.mu.Lock()
	t.closed = true
	all := t.byID
	t.byID, t.expiry = map[string]*permit{}, nil
	t.mu.Unlock()
	for _, p := range all {
		p.done(context.Canceled)
	}
	return len(all)
}

// runExpiry drops lapsed permits every interval until ctx is done. Dropping a permit
// changes no breaker, so when within the interval it happens matters only to memory
// and to which answer (204 or 410) a late settle gets.
func (t *permits) runExpiry(ctx context.Context, interval time.Duration, now func() time.Time) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			t.expire(now())
		}
	}
}

// expiryHeap orders permits by when their lease ends (container/heap).
type expiryHeap []*permit

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].expires.Before(h[j].expires) }
func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *expiryHeap) Push(x any) {
	p := x.(*permit)
	p.index = len(*h)
	*h = append(*h, p)
}
func (h *expiryHeap) Pop() any {
	old := *h
	n := len(old)
	p := old[n-1]
	old[n-1] = nil
	p.index = -1
	*h = old[:n-1]
	return p
}
