package fuseboxd

import (
	"container/heap"
	"context"
	"crypto/rand"
	"sync"
	"sync/atomic"
	"time"
)

// permit is one admitted call whose outcome the client has yet to report.
type permit struct {
	id      string
	done    func(error)
	expires time.Time // on the monotonic clock (time.Now)
	index   int       // in the expiry heap; -1 once out of it
	from    client    // whose cap it counts against
	counts  *permitCounts
	// slot: the call holds a slot of its breaker's concurrency limit, which its lapse
	// gives back (expire).
	slot bool
}

// permitCounts are one breaker's permits, as GET /v1/breakers/{name} shows them.
type permitCounts struct {
	held         atomic.Int64 // outstanding now
	lapsed       atomic.Int64 // dropped unsettled at the end of their lease, since the daemon started
	refusedAtCap atomic.Int64 // acquires refused because a client, the table or the connections were at their cap
}

// shortage is why add stored no permit.
type shortage int

const (
	noShortage shortage = iota
	clientAtCap
	tableAtCap
	tableClosed
	connectionsAtCap // not the table's: admit's, for warnings
)

// permits holds the outstanding permits by id, and by expiry so that lapsed ones are
// dropped without scanning them all.
type permits struct {
	mu           sync.Mutex
	byID         map[string]*permit
	expiry       expiryHeap
	byClient     map[client]int // how many permits each client holds
	max          int
	maxPerClient int
	closed       bool // shutting down: no new permits
}

func newPermits(limit, perClient int) *permits {
	return &permits{byID: make(map[string]*permit), byClient: make(map[client]int), max: limit, maxPerClient: perClient}
}

// add stores done under a new id until lease has passed, counted against from and in
// counts; slot says the call holds a slot of a concurrency limit. It stores nothing, and
// says why, when from holds maxPerClient permits, max are outstanding or the table is
// closed; the caller must then settle done itself.
func (t *permits) add(done func(error), lease time.Duration, now time.Time, from client, counts *permitCounts, slot bool) (string, shortage) {
	// 128 random bits: ids are not guessable by another client of the socket, and never
	// collide with a permit settled earlier.
	id := rand.Text()
	p := &permit{id: id, done: done, expires: now.Add(lease), from: from, counts: counts, slot: slot}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.closed:
		return "", tableClosed
	case t.byClient[from] >= t.maxPerClient:
		return "", clientAtCap
	case len(t.byID) >= t.max:
		return "", tableAtCap
	}
	t.byID[id] = p
	t.byClient[from]++
	heap.Push(&t.expiry, p)
	counts.held.Add(1)
	return id, noShortage
}

// take removes and returns the done of the permit id, if it is outstanding.
func (t *permits) take(id []byte) (func(error), bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p, ok := t.byID[string(id)]
	if !ok {
		return nil, false
	}
	heap.Remove(&t.expiry, p.index)
	t.forget(p)
	return p.done, true
}

// forget removes p, out of the expiry heap already, from the table and its counts.
func (t *permits) forget(p *permit) {
	delete(t.byID, p.id)
	if n := t.byClient[p.from] - 1; n > 0 {
		t.byClient[p.from] = n
	} else {
		delete(t.byClient, p.from) // a client's entry lives as long as its permits
	}
	p.counts.held.Add(-1)
}

// expire drops every permit whose lease has passed at now, and returns how many. Their
// done is not called: the breaker treats them as calls that never finished (§5.3). But a
// call that holds a slot of a concurrency limit gives it back, settled as ignored (the
// outcome the library records nothing for): a leaked permit must not shrink the pod's
// limit for the breaker's life (docs/design.md §12).
func (t *permits) expire(now time.Time) int {
	var slots []func(error)
	t.mu.Lock()
	n := 0
	for len(t.expiry) > 0 && !t.expiry[0].expires.After(now) {
		p := heap.Pop(&t.expiry).(*permit)
		t.forget(p)
		p.counts.lapsed.Add(1)
		if p.slot {
			slots = append(slots, p.done)
		}
		n++
	}
	if n > 0 && len(t.byID) == 0 {
		// A map keeps its buckets after a burst of leaks; start afresh so that the
		// memory goes back too.
		t.byID, t.byClient, t.expiry = make(map[string]*permit), make(map[client]int), nil
	}
	t.mu.Unlock()
	// Without the table's lock: done takes the breaker's, and may wake a caller waiting
	// for the slot.
	for _, done := range slots {
		done(context.Canceled)
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
	t.byID, t.byClient, t.expiry = map[string]*permit{}, map[client]int{}, nil
	t.mu.Unlock()
	for _, p := range all {
		p.counts.held.Add(-1)
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
