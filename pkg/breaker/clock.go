package breaker

import (
	"sync"
	"sync/atomic"
	"time"
)

// Two clocks (docs/semantics.md, "Clocks"). Every duration a breaker measures (the window's buckets,
// open periods, the half-open limit on leaked probes) is measured on a monotonic timeline,
// so that a step of the wall clock (NTP, a VM resumed, an operator with date -s) neither
// lengthens nor shortens any of them. What leaves the process (Transition.At, Verdict.Since)
// is wall-clock time, the only kind another process can compare with its own.
//
// The monotonic timeline is in Unix nanoseconds as the wall clock read when the process
// started (processStart), plus the monotonic time elapsed since: it reads as wall-clock
// time until the wall clock is stepped, and is unmoved by the step. Buckets are aligned to
// the Unix epoch on this timeline (§5.1), that is, as the wall clock stood at start; a later
// step of the wall clock shifts where they fall on it but never re-cuts the window. A
// breaker with an injected Clock has the same kind of timeline, anchored at its clock's
// first reading (see WithClock).
//
// The call path must not read the clocks: time.Now costs about as much as everything else a
// closed breaker does per call put together. Breakers without an injected Clock read this
// coarse clock instead, a reading of the monotonic timeline that a ticker goroutine
// refreshes every coarseTick while breakers are in use.
//
// What that trades: a reading is up to one tick old (more if the scheduler delays the
// ticker), so an outcome near a bucket boundary may land in the earlier bucket and an open
// circuit goes half-open up to about a millisecond after openTimeout — late, never early.
// Transitions read both clocks exactly.
//
// The ticker goroutine, (*coarseClock).run, is the one goroutine the package starts. It
// stops by itself at most coarseLifetime ticks (about 100 ms) after the last reading that
// started it, so a process that stops using its breakers has none left. A test that checks
// for leaked goroutines with go.uber.org/goleak need not ignore it: VerifyNone retries for
// about 400 ms by default, longer than the ticker outlives the last call
// (TestCoarseClockStopsSoon). With fewer retries, ignore it with
// goleak.IgnoreTopFunction("github.com/fusebox-dev/fusebox/pkg/breaker.(*coarseClock).run").
const (
	coarseTick = time.Millisecond
	// The ticker stops after this many ticks, and the next reading starts a new one. That
	// keeps an idle process from waking a thousand times a second for nothing without
	// readers having to write anything to say they are still there: a busy process pays one
	// goroutine start (about a microsecond) every 100 ms.
	coarseLifetime = 100
)

var coarse coarseClock

type coarseClock struct {
	// The unused atomic.Int64 makes the struct, and so nanos, 64-bit aligned on 32-bit
	// platforms too, as sync/atomic requires.
	_ atomic.Int64
	_ [56]byte
	// nanos is the last reading, or 0 while no ticker runs. Only the ticker and start write
	// it, so the call path only ever reads this line. It is a plain int64 used through
	// sync/atomic's functions, not an atomic.Int64, because its Load method costs the
	// inliner just enough more to keep Breaker.now from inlining into the call path.
	nanos int64
	_     [56]byte

	mu      sync.Mutex
	running bool // guarded by mu
}

var (
	processStart     = time.Now() // carries Go's monotonic clock reading
	processStartWall = processStart.UnixNano()
)

// monoOf places t, a reading of time.Now, on the monotonic timeline.
func monoOf(t time.Time) int64 { return addSat(processStartWall, int64(t.Sub(processStart))) }

// instant is one moment read on both clocks: wall for what leaves the process, mono for
// durations.
type instant struct{ wall, mono int64 }

// exactInstant reads both clocks at once, for transitions.
func exactInstant() instant {
	t := time.Now()
	return instant{wall: t.UnixNano(), mono: monoOf(t)}
}

// back returns the moment at wall-clock time wall, placed on the monotonic timeline as far
// before (or after) at as the wall clock says: how a verdict's Since, which is wall-clock
// time from another process, becomes the start of a local open period.
func (at instant) back(wall int64) instant {
	return instant{wall: wall, mono: addSat(at.mono, -subSat(at.wall, wall))}
}

// at returns the moment mono on the monotonic timeline (at or before at.mono), with its
// wall-clock time as far before at.wall as it is before at.mono: when a move that time
// made happened, read when it is noticed.
func (at instant) at(mono int64) instant {
	return instant{wall: subSat(at.wall, subSat(at.mono, mono)), mono: mono}
}

// coarseNow is small enough to inline into the call path.
func coarseNow() int64 {
	if n := atomic.LoadInt64(&coarse.nanos); n != 0 {
		return n
	}
	return coarse.start()
}

func (c *coarseClock) start() int64 {
	now := monoOf(time.Now())
	c.mu.Lock()
	if !c.running {
		c.running = true
		atomic.StoreInt64(&c.nanos, now)
		go c.run()
	}
	c.mu.Unlock()
	return now
}

func (c *coarseClock) run() {
	t := time.NewTicker(coarseTick)
	defer t.Stop()
	for range coarseLifetime {
		<-t.C
		atomic.StoreInt64(&c.nanos, monoOf(time.Now()))
	}
	c.mu.Lock()
	atomic.StoreInt64(&c.nanos, 0)
	c.running = false
	c.mu.Unlock()
}

// clockReader is how a breaker reads an injected Clock, on the same two timelines: wall time
// from Now, and a monotonic timeline anchored at the clock's first reading (base, its wall
// time) that moves by the clock's Monotonic readings if it has them, and otherwise by the
// difference between Now readings, which Go computes on the monotonic clock when both
// carry one (time.Now's do) and on the wall clock when not.
type clockReader struct {
	c     Clock
	mc    monotonicClock // c, when it has Monotonic
	t0    time.Time
	mono0 time.Duration
	base  int64
}

func newClockReader(c Clock) *clockReader {
	r := &clockReader{c: c, t0: c.Now()}
	r.base = r.t0.UnixNano()
	if mc, ok := c.(monotonicClock); ok {
		r.mc, r.mono0 = mc, mc.Monotonic()
	}
	return r
}

func (r *clockReader) mono() int64 {
	if r.mc != nil {
		return addSat(r.base, int64(r.mc.Monotonic()-r.mono0))
	}
	return addSat(r.base, int64(r.c.Now().Sub(r.t0)))
}

func (r *clockReader) instant() instant {
	t := r.c.Now()
	if r.mc != nil {
		return instant{wall: t.UnixNano(), mono: r.mono()}
	}
	return instant{wall: t.UnixNano(), mono: addSat(r.base, int64(t.Sub(r.t0)))}
}
