package breaker

import (
	"sync/atomic"

	"github.com/fusebox-dev/fusebox/pkg/breaker/internal/core"
)

// The tally is what the retry budget (§5.15) and adaptive throttling (§5.16) count beside the
// failure window: retries and throttled calls, over the same two epoch-aligned buckets of
// the policy's window (bucket index floor(now / window); the live bucket and the one before
// it, so between one and two windows of history). Requests and accepts are not counted
// again: they are the failure window's calls (plus the throttled ones) and its calls less
// its failures, read without the lock (liveBucket.totals), so that a call costs the closed
// path's one atomic add whether or not a budget or throttling is configured. It exists only while
// closed and only when one of the two is configured, and it is lock-free for reading and
// counting alike: each bucket is an immutable index with atomic counters, installed once
// per index by compare-and-swap, so every count lands in exactly one bucket and a reader
// never waits for the breaker's lock.
type tally struct {
	width  int64 // the window, in nanoseconds
	origin int64 // when the tally started counting, on the monotonic timeline
	live   atomic.Pointer[tallyBucket]
	// slots hold the buckets by the parity of their index: the live one and the one
	// before it.
	slots [2]atomic.Pointer[tallyBucket]
}

type tallyBucket struct {
	idx        int64
	start, end int64 // [start, end) on the monotonic timeline
	retries    atomic.Int64
	throttled  atomic.Int64
}

// trafficCounts are a tally's totals over the window.
type trafficCounts struct {
	requests, accepts, retries, throttled int64
}

func newTally(width, now int64) *tally {
	t := &tally{width: width, origin: now}
	bk := t.newBucket(floorDiv(now, width))
	t.slots[bk.idx&1].Store(bk)
	t.live.Store(bk)
	return t
}

func (t *tally) newBucket(idx int64) *tallyBucket {
	bk := &tallyBucket{idx: idx, start: mulSat(idx, t.width)}
	bk.end = core.AddSat(bk.start, t.width)
	return bk
}

// at returns the bucket that counts what happens at now, rolling the tally forward when
// now has left the live bucket. A reading older than the live bucket (a goroutine whose
// clock reading is a tick late) counts in the live bucket: it happened at its start, near
// enough.
func (t *tally) at(now int64) *tallyBucket {
	if live := t.live.Load(); now >= live.start && now < live.end {
		return live
	}
	return t.roll(now)
}

func (t *tally) roll(now int64) *tallyBucket {
	live := t.live.Load()
	idx := floorDiv(now, t.width)
	if idx <= live.idx {
		return live
	}
	slot := &t.slots[idx&1]
	for {
		old := slot.Load()
		if old != nil && old.idx >= idx {
			break
		}
		if slot.CompareAndSwap(old, t.newBucket(idx)) {
			break
		}
	}
	cur := slot.Load()
	for {
		l := t.live.Load()
		if l.idx >= cur.idx {
			return l
		}
		if t.live.CompareAndSwap(l, cur) {
			return cur
		}
	}
}

// span is how long the window holds counts for at now, in the live bucket cur: from the
// start of the bucket before it, or from when the tally started if that is later. It lies
// between one and two widths once the tally has counted for two.
func (t *tally) span(now int64, cur *tallyBucket) int64 {
	return max(now-max(t.origin, cur.start-t.width), 0)
}

// prev returns the bucket before cur, or nil when the tally has none.
func (t *tally) prev(cur *tallyBucket) *tallyBucket {
	if p := t.slots[(cur.idx-1)&1].Load(); p != nil && p.idx == cur.idx-1 {
		return p
	}
	return nil
}

// window returns the live bucket at now and the totals of it and the bucket before it, with
// the requests and accepts of the failure window whose live bucket is live (which a roll
// may not have replaced yet: liveBucket.totalsAt).
func (t *tally) window(now int64, live *liveBucket) (*tallyBucket, trafficCounts) {
	cur := t.at(now)
	var c trafficCounts
	for _, bk := range [2]*tallyBucket{cur, t.prev(cur)} {
		if bk != nil {
			c.retries += bk.retries.Load()
			c.throttled += bk.throttled.Load()
		}
	}
	calls, failures := live.totalsAt(now)
	c.requests, c.accepts = calls+c.throttled, calls-failures
	return cur, c
}

// retriesAndCalls is window's part the retry budget needs, and no more: the live bucket at
// now, the retries of it and the bucket before, and the failure window's calls.
func (t *tally) retriesAndCalls(now int64, live *liveBucket) (cur *tallyBucket, retries, calls int64) {
	cur = t.at(now)
	retries = cur.retries.Load()
	if p := t.prev(cur); p != nil {
		retries += p.retries.Load()
	}
	calls, _ = live.totalsAt(now)
	return cur, retries, calls
}

// reindexed re-cuts t for a new width as the failure window is re-cut: what the live bucket
// at now holds becomes the new-width bucket holding now, the bucket before stays the one before,
// and both age out under the new width.
func (t *tally) reindexed(width, now int64) *tally {
	n := newTally(width, now)
	n.origin = t.origin
	old := t.at(now) // rolled under the old width first, as Update rolls the failure window

	cur := n.live.Load()
	cur.add(old)
	if prev := t.prev(old); prev != nil {
		p := n.newBucket(cur.idx - 1)
		p.add(prev)
		n.slots[p.idx&1].Store(p)
	}
	return n
}

func (bk *tallyBucket) add(o *tallyBucket) {
	bk.retries.Add(o.retries.Load())
	bk.throttled.Add(o.throttled.Load())
}
