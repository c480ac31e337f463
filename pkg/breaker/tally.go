package breaker

import "sync/atomic"

// The tally is what the retry budget (§5.15) and adaptive throttling (§5.16) count: calls,
// successes, retries and throttled calls, over the same two epoch-aligned buckets of the
// policy's window as the failure window (bucket index floor(now / window); the live bucket
// and the one before it, so between one and two windows of history). It exists only while
// closed and only when one of the two is configured, and it is lock-free for reading and
// counting alike: each bucket is an immutable index with atomic counters, installed once
// per index by compare-and-swap, so every count lands in exactly one bucket and a reader
// never waits for the breaker's lock.
type tally struct {
	width int64 // the window, in nanoseconds
	live  atomic.Pointer[tallyBucket]
	// slots hold the buckets by the parity of their index: the live one and the one
	// before it.
	slots [2]atomic.Pointer[tallyBucket]
}

type tallyBucket struct {
	idx        int64
	start, end int64 // [start, end) on the monotonic timeline
	admitted   atomic.Int64
	accepts    atomic.Int64
	retries    atomic.Int64
	throttled  atomic.Int64
}

// trafficCounts are a tally's totals over the window.
type trafficCounts struct {
	admitted, accepts, retries, throttled int64
}

func newTally(width, now int64) *tally {
	t := &tally{width: width}
	bk := t.newBucket(floorDiv(now, width))
	t.slots[bk.idx&1].Store(bk)
	t.live.Store(bk)
	return t
}

func (t *tally) newBucket(idx int64) *tallyBucket {
	bk := &tallyBucket{idx: idx, start: mulSat(idx, t.width)}
	bk.end = addSat(bk.start, t.width)
	return bk
}

// at returns the bucket that counts what happens at now, rolling the tally forward when
// now has left the live bucket. A reading older than the live bucket (a goroutine whose
// clock reading is a tick late) counts in the live bucket: it happened at its start, near
// enough.
func (t *tally) at(now int64) *tallyBucket {
	live := t.live.Load()
	if now >= live.start && now < live.end {
		return live
	}
	return t.roll(now, live)
}

func (t *tally) roll(now int64, live *tallyBucket) *tallyBucket {
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

// window returns the live bucket at now and the totals of it and the bucket before it.
func (t *tally) window(now int64) (*tallyBucket, trafficCounts) {
	cur := t.at(now)
	c := trafficCounts{cur.admitted.Load(), cur.accepts.Load(), cur.retries.Load(), cur.throttled.Load()}
	if prev := t.slots[(cur.idx-1)&1].Load(); prev != nil && prev.idx == cur.idx-1 {
		c.admitted += prev.admitted.Load()
		c.accepts += prev.accepts.Load()
		c.retries += prev.retries.Load()
		c.throttled += prev.throttled.Load()
	}
	return cur, c
}

// requests are the calls the closed breaker was asked to run: admitted or throttled.
func (c trafficCounts) requests() int64 { return c.admitted + c.throttled }

// firstAttempts are the admitted calls that were not retries.
func (c trafficCounts) firstAttempts() int64 { return max(c.admitted-c.retries, 0) }

// reindexed re-cuts t for a new width as the failure window is re-cut: what the live bucket
// holds becomes the new-width bucket holding now, the bucket before stays the one before,
// and both age out under the new width.
func (t *tally) reindexed(width, now int64) *tally {
	n := newTally(width, now)
	old := t.live.Load()
	cur := n.live.Load()
	cur.add(old)
	if prev := t.slots[(old.idx-1)&1].Load(); prev != nil && prev.idx == old.idx-1 {
		p := n.newBucket(cur.idx - 1)
		p.add(prev)
		n.slots[p.idx&1].Store(p)
	}
	return n
}

func (bk *tallyBucket) add(o *tallyBucket) {
	bk.admitted.Add(o.admitted.Load())
	bk.accepts.Add(o.accepts.Load())
	bk.retries.Add(o.retries.Load())
	bk.throttled.Add(o.throttled.Load())
}
