package nodeagent

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// Pacing (docs/design.md §9): each node report is written at most once per interval. A
// change that brings news the fleet decides on (urgent: an earned state, a new config
// generation or refusal, a breaker or pod leaving by the pod's own word) goes gather after
// it came when the object has been quiet, together with everything that changed
// meanwhile. What follows it is the rest of the burst that write began: the node's other
// pods tripping a moment later, and their echoes of the verdict the fleet reaches. A
// change that moves a pod's circuit without news (an adopted verdict, a forced mode, a
// timeout) or an earned one that comes within a hold of the last write waits until the
// node's pods agree (every pod of each breaker in one state: the burst is over) or, at
// most, settle from the first of them; the pods of a node hear the fleet's verdict on the
// agent's own streams but take it over up to two seconds on a busy node, and a fixed hold
// cut their echoes in two (settle is above that spread: only pods that do not come to
// agree wait it out). Any other change that only echoes what the pods were told
// or what time did (a breaker's first word, traffic, a pod gone from the node) waits a hold
// from the first of them; an urgent change takes whatever waits with it.
//
// gather is what "at once" costs: when a dependency fails, the pods of a node that call
// it trip within moments of each other, and their reports reach the agent over some tens
// of milliseconds. Written the instant the first arrives, the node's evidence took two
// writes (the first pod, then the rest an interval later) before the echoes' third;
// gathered, an incident costs the object two writes, its evidence and its echoes, for a
// tenth of a second on the fleet's first sight of it. Every write rewrites the whole
// object, and costs the API server by its size (docs/benchmarks.md).
type pacing struct {
	gather   time.Duration
	interval time.Duration
	hold     time.Duration
	settle   time.Duration
}

var defaultPacing = pacing{gather: 200 * time.Millisecond, interval: 250 * time.Millisecond, hold: 500 * time.Millisecond, settle: 3 * time.Second}

// maxConcurrentWrites bounds the writes in flight, each to another namespace's object;
// one object is never written twice at once.
const maxConcurrentWrites = 4

// change is what a report holds that is not written yet: since when, whether any of it is
// urgent, whether it moved a pod's circuit, and whether a shutting-down agent flushes it.
type change struct {
	since  time.Time // zero: nothing
	urgent bool
	moved  bool
	flush  bool
}

func (c change) merge(o change) change {
	switch {
	case c.since.IsZero():
		return o
	case o.since.IsZero():
		return c
	}
	if o.since.Before(c.since) {
		c.since = o.since
	}
	c.urgent = c.urgent || o.urgent
	c.moved = c.moved || o.moved
	c.flush = c.flush || o.flush
	return c
}

// due is when a report whose pending changes are c, last written at lastWrite, and not to
// be retried before retryAt, may be written; agreed says whether the node's pods agree
// (every pod of each breaker in one state).
func (p pacing) due(c change, lastWrite, retryAt time.Time, agreed bool) time.Time {
	// An earned change after a quiet spell goes after the gather. One that comes less than
	// a hold after the object's last write belongs to the burst that write began (the rest
	// of a node's pods tripping a moment later than the first), and waits with the burst's
	// echoes until the pods agree: an incident then costs the object two writes however
	// its trips and echoes spread.
	var wait time.Duration
	switch {
	case c.flush:
		wait = 0
	case c.urgent && (lastWrite.IsZero() || c.since.Sub(lastWrite) >= p.hold):
		wait = p.gather
	case c.moved && agreed:
		wait = 0
	case c.moved:
		wait = p.settle
	default:
		wait = p.hold
	}
	at := c.since.Add(wait)
	if next := lastWrite.Add(p.interval); !lastWrite.IsZero() && next.After(at) {
		at = next
	}
	if retryAt.After(at) {
		at = retryAt
	}
	return at
}

// retryDelay paces the retries of a report whose writes failed n times in a row: 100 ms
// doubling to 4 s, each up to a quarter longer at random, as the pods' own writes retry.
func retryDelay(n int) time.Duration {
	d := min(100*time.Millisecond<<min(n-1, 6), 4*time.Second)
	return d + rand.N(d/4+1)
}

// job is one write the writer has taken: a namespace's entries as they stood (none: the
// object is deleted).
type job struct {
	namespace string
	entries   []resiliencev1alpha1.NodeBreakerEntry
	owner     types.UID
}

// take returns the writes due at now, urgent ones first and then the oldest, at most as
// many as may start, and when the writer must look again (zero: nothing pending). A due
// report that already says what the API server holds is not written: its changes undid
// each other.
func (b *book) take(now time.Time) ([]job, time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	type candidate struct {
		ns      string
		r       *nsReport
		due     time.Time
		entries []resiliencev1alpha1.NodeBreakerEntry
	}
	var due []candidate
	var next time.Time
	later := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	for ns, r := range b.reports {
		if r.pending.since.IsZero() || r.inflight {
			continue
		}
		if b.held(ns, r, now) {
			later(now.Add(b.pace.interval))
			continue
		}
		at := b.pace.due(r.pending, r.lastWrite, r.retryAt, r.pending.moved && r.agreed())
		if at.After(now) {
			later(at)
			continue
		}
		entries, same := b.matchesWritten(r)
		if same {
			r.pending = change{}
			b.forget(ns, r)
			continue
		}
		due = append(due, candidate{ns, r, at, entries})
	}
	slices.SortFunc(due, func(a, c candidate) int {
		switch {
		case a.r.pending.urgent != c.r.pending.urgent:
			if a.r.pending.urgent {
				return -1
			}
			return 1
		case !a.r.pending.since.Equal(c.r.pending.since):
			return a.r.pending.since.Compare(c.r.pending.since)
		}
		return 0
	})
	var jobs []job
	for _, c := range due {
		if b.active >= maxConcurrentWrites {
			later(now) // look again as soon as a write ends
			break
		}
		b.active++
		c.r.inflight = true
		c.r.taken, c.r.pending = c.r.pending, change{}
		jobs = append(jobs, job{namespace: c.ns, entries: c.entries, owner: b.owner})
	}
	return jobs, next
}

// forget drops a namespace's report that holds no line and has no object. Caller holds mu.
func (b *book) forget(ns string, r *nsReport) {
	if len(r.lines) == 0 && !r.exists && r.pending.since.IsZero() && !r.inflight {
		delete(b.reports, ns)
	}
}

// write does one job: the object applied, or deleted when no pod of its namespace reports
// any more.
func (b *book) write(ctx context.Context, j job) {
	start := b.clock.Now()
	var err error
	if len(j.entries) == 0 {
		err = b.writer.remove(ctx, j.namespace)
	} else {
		err = b.writer.write(ctx, b.object(j.namespace, j.entries, j.owner))
	}
	b.latency.observe(b.clock.Since(start), err)
	b.done(j, start, err)
}

// done records how a job went: on success what the API server now holds; on failure the
// job's changes are pending again, to be retried after a backoff.
func (b *book) done(j job, start time.Time, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	defer b.signal()
	b.active--
	r := b.reports[j.namespace]
	r.inflight = false
	if err == nil {
		b.writes.Add(1)
		r.written, r.writtenOwner, r.exists = nil, j.owner, len(j.entries) > 0
		if r.exists {
			r.written, _ = json.Marshal(j.entries)
		}
		r.lastWrite, r.retryAt, r.failures, r.taken = start, time.Time{}, 0, change{}
		if r.failing != "" {
			b.log.Info("Node report written again after failures", "namespace", j.namespace)
			r.failing = ""
		}
		b.forget(j.namespace, r)
		return
	}
	b.failures.Add(1)
	r.failures++
	r.retryAt = b.clock.Now().Add(retryDelay(r.failures))
	r.pending, r.taken = r.pending.merge(r.taken), change{}
	if msg := err.Error(); msg != r.failing {
		r.failing = msg
		if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err) {
			b.log.Error("The API server refused this node's report; retrying with backoff", "namespace", j.namespace, "error", err)
		} else {
			b.log.Warn("Cannot write this node's report; retrying with backoff", "namespace", j.namespace, "error", err)
		}
	}
}

// run is the writer: it starts the writes that are due, and waits until the next is, or
// until a change or a finished write wakes it, until ctx ends; then it waits for the
// writes in flight.
func (b *book) run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	timer := b.clock.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := b.clock.Now()
		jobs, next := b.take(now)
		for _, j := range jobs {
			wg.Go(func() { b.write(ctx, j) })
		}
		var fire <-chan time.Time
		if !next.IsZero() {
			timer.Stop()
			timer.Reset(max(next.Sub(now), 0))
			fire = timer.C()
		}
		select {
		case <-ctx.Done():
			return
		case <-b.wake:
		case <-fire:
		}
	}
}

// idle reports whether nothing is pending and nothing is being written.
func (b *book) idle() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, r := range b.reports {
		if r.inflight {
			return false
		}
		if !r.pending.since.IsZero() {
			if _, same := b.matchesWritten(r); !same {
				return false
			}
		}
	}
	return true
}

// flush writes what is pending without waiting for holds, and returns once nothing is
// left or ctx ends. A shutting-down agent calls it while its writer still runs.
func (b *book) flush(ctx context.Context) error {
	b.mu.Lock()
	for _, r := range b.reports {
		if !r.pending.since.IsZero() {
			r.pending.urgent, r.pending.flush = true, true
		}
	}
	b.signal()
	b.mu.Unlock()
	for !b.idle() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}
