package breaker

import (
	"math"
	"sync/atomic"
	"unsafe"

	"github.com/fusebox-dev/fusebox/pkg/breaker/internal/core"
)

// The rolling window (§5.1): two epoch-aligned buckets, the live one and the one before.
// The live bucket's count of calls is an atomic the call path adds successes to without the
// lock; its failures, and the previous bucket, are guarded by mu.

const sealed = math.MinInt64 // sign bit of a stripe's count: the bucket is retired

// liveBucket is the window's current bucket, which successes are added to without the lock.
// When it is retired (rollover, transition, re-indexing) the lock holder seals it by setting
// the sign bit of every stripe; an adder that sees the bit in the value its Add returned
// knows its call was not counted there and takes the lock instead. Every outcome is
// therefore counted exactly once, or found stale, even when it races the retirement.
type liveBucket struct {
	gen        uint64 // the state period the bucket belongs to
	idx        int64  // floor(start / window)
	start, end int64  // on the monotonic timeline (clock.go), [start, end)
	// fastEnd is end while successes may be counted lock-free, and MinInt64 while they
	// must take the lock because one could open the circuit on slow calls (guardSlow): the
	// lock-free path's one time test then sends them there.
	fastEnd atomic.Int64
	_       [64]byte
	// The count of calls is striped over cache lines, so that goroutines on different cores
	// do not take turns owning one line: under RunParallel on two cores one shared counter
	// cost about twice as much per add as eight stripes.
	stripes [stripeCount]stripe
	_       [64]byte
	// What the retry budget and throttling read without the lock (tally.go): the live
	// bucket's failures, kept beside mu's liveFailures, and the totals of the bucket
	// before it, fixed when this one was installed.
	failures                atomic.Int64
	prevCalls, prevFailures int64
}

// totalsAt returns the window's calls and failures at now as the live bucket bk sees them,
// without the lock. Calls are recorded outcomes (successes and failures; ignored ones are
// not calls). A bucket that now has left is what the next roll will make of it: the
// previous bucket, or gone. A reading that races a roll may be off by the calls in flight
// across it, which a probability judged on the whole window does not notice.
func (bk *liveBucket) totalsAt(now int64) (calls, failures int64) {
	switch {
	case now < bk.end:
		return bk.calls() + bk.prevCalls, bk.failures.Load() + bk.prevFailures
	case now < core.AddSat(bk.end, bk.end-bk.start):
		return bk.calls(), bk.failures.Load()
	}
	return 0, 0
}

const (
	stripeBits  = 3
	stripeCount = 1 << stripeBits
)

type stripe struct {
	calls atomic.Int64
	_     [56]byte
}

// addFast counts one call on the caller's stripe and reports whether the bucket was still
// live.
func (bk *liveBucket) addFast() bool {
	return bk.stripes[stripeHint()].calls.Add(1)&sealed == 0
}

// guarded reports whether successes must take the lock (guardSlow).
func (bk *liveBucket) guarded() bool { return bk.fastEnd.Load() == math.MinInt64 }

// guard sends successes to the lock, or lets them count lock-free again. Caller holds mu.
func (bk *liveBucket) guard(on bool) {
	if on != bk.guarded() {
		end := bk.end
		if on {
			end = math.MinInt64
		}
		bk.fastEnd.Store(end)
	}
}

// stripeHint tells goroutines apart cheaply: each runs on its own stack, so the address of
// a local variable differs between them and rarely changes for one of them. A collision or
// a moved stack costs only some contention, never a wrong count.
func stripeHint() uintptr {
	var local byte
	// Fibonacci hashing of the address above its low bits, so that stacks that lie a
	// power of two apart (they often do) still land on different stripes.
	return uintptr((uint64(uintptr(unsafe.Pointer(&local))>>10) * 0x9E3779B97F4A7C15) >> (64 - stripeBits))
}

func (bk *liveBucket) calls() int64 {
	var n int64
	for i := range bk.stripes {
		n += bk.stripes[i].calls.Load() &^ sealed
	}
	return n
}

// windowCounts totals the live and previous buckets. Caller holds mu and has rolled.
func (b *Breaker) windowCounts() Counts {
	return Counts{
		Calls:    b.bucket.Load().calls() + b.prevCalls,
		Failures: b.liveFailures + b.prevFailures,
		Slow:     b.liveSlow + b.prevSlow,
	}
}

// roll moves the window to the bucket that holds now, forgetting what is two buckets old.
// A clock that went backwards leaves the window where it is. Caller holds mu.
func (b *Breaker) roll(now int64) {
	live := b.bucket.Load()
	idx := floorDiv(now, int64(b.policy.Window))
	if idx <= live.idx {
		return
	}
	calls := b.seal(live)
	if idx == live.idx+1 {
		b.prevCalls, b.prevFailures, b.prevSlow = calls, b.liveFailures, b.liveSlow
	} else {
		b.prevCalls, b.prevFailures, b.prevSlow = 0, 0, 0
	}
	b.liveFailures, b.liveSlow = 0, 0
	b.installBucket(idx, 0)
	b.armThrottle()
	if b.prevSlow > 0 {
		b.guardSlow(b.windowCounts())
	}
}

// reindex re-cuts the window after its width changed: the live bucket's tallies become
// those of the new-width bucket holding now and the previous bucket stays the previous one,
// so nothing is lost and both age out under the new width. Caller holds mu and has rolled
// under the old width.
func (b *Breaker) reindex(now int64) {
	calls := b.seal(b.bucket.Load())
	b.installBucket(floorDiv(now, int64(b.policy.Window)), calls)
	b.guardSlow(b.windowCounts())
}

// resetWindow empties the window. Caller holds mu (or owns b).
func (b *Breaker) resetWindow(now int64) {
	if live := b.bucket.Load(); live != nil {
		b.seal(live)
	}
	b.liveFailures, b.prevCalls, b.prevFailures = 0, 0, 0
	b.liveSlow, b.prevSlow = 0, 0
	b.installBucket(floorDiv(now, int64(b.policy.Window)), 0)
}

func (b *Breaker) seal(bk *liveBucket) int64 {
	var n int64
	for i := range bk.stripes {
		n += bk.stripes[i].calls.Or(sealed) &^ sealed
	}
	return n
}

func (b *Breaker) installBucket(idx, calls int64) {
	w := int64(b.policy.Window)
	bk := &liveBucket{gen: b.gen, idx: idx}
	bk.start = mulSat(idx, w)
	bk.end = core.AddSat(bk.start, w)
	bk.fastEnd.Store(bk.end)
	bk.stripes[0].calls.Store(calls)
	bk.failures.Store(b.liveFailures)
	bk.prevCalls, bk.prevFailures = b.prevCalls, b.prevFailures
	b.bucket.Store(bk)
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func mulSat(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	r := a * b
	if r/b != a {
		if (a < 0) != (b < 0) {
			return math.MinInt64
		}
		return math.MaxInt64
	}
	return r
}
