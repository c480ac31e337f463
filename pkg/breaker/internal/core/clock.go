package core

import (
	"math"
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
// first reading (see breaker.WithClock).
//
// The call path must not read the clocks: time.Now costs about as much as everything else a
// closed breaker does per call put together. Breakers without an injected Clock read this
// coarse clock instead, a reading of the monotonic timeline that a ticker goroutine
// refreshes every CoarseTick while breakers are in use.
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
// goleak.IgnoreTopFunction("github.com/fusebox-dev/fusebox/pkg/breaker/internal/core.(*coarseClock).run").
const (
	CoarseTick = time.Millisecond
	// The ticker stops after this many ticks, and the next reading starts a new one. That
	// keeps an idle process from waking a thousand times a second for nothing without
	// readers having to write anything to say they are still there: a busy process pays one
	// goroutine start (about a microsecond) every 100 ms.
	coarseLifetime = 100
)

// Coarse is the coarse clock. Breaker.now reads Coarse.Nanos itself, with
// atomic.LoadInt64, rather than through a function: the call, inlined, would cost the
// inliner just enough more to keep Breaker.now from inlining into the call path.
var Coarse coarseClock

type coarseClock struct {
	// The unused atomic.Int64 makes the struct, and so Nanos, 64-bit aligned on 32-bit
	// platforms too, as sync/atomic requires.
	_ atomic.Int64
	_ [56]byte
	// Nanos is the last reading, or 0 while no ticker runs. Only the ticker and start write
	// it, so the call path only ever reads this line. It is a plain int64 used through
	// sync/atomic's functions, not an atomic.Int64, because its Load method costs the
	// inliner just enough more to keep Breaker.now from inlining into the call path.
	Nanos int64
	_     [56]byte

	mu      sync.Mutex
	running bool // guarded by mu
}

var (
	processStart     = time.Now() // carries Go's monotonic clock reading
	processStartWall = processStart.UnixNano()
)

// MonoOf places t, a reading of time.Now, on the monotonic timeline.
func MonoOf(t time.Time) int64 { return AddSat(processStartWall, int64(t.Sub(processStart))) }

// Instant is one moment read on both clocks: wall for what leaves the process, mono for
// durations.
type Instant struct{ Wall, Mono int64 }

// ExactInstant reads both clocks at once, for transitions.
func ExactInstant() Instant {
	t := time.Now()
	return Instant{Wall: t.UnixNano(), Mono: MonoOf(t)}
}

// ExactMono reads the monotonic timeline exactly, without the wall clock: how a call
// shorter than the coarse clock can resolve is timed.
func ExactMono() int64 { return AddSat(processStartWall, int64(time.Since(processStart))) }

// Back returns the moment at wall-clock time wall, placed on the monotonic timeline as far
// before (or after) at as the wall clock says: how a verdict's Since, which is wall-clock
// time from another process, becomes the start of a local open period.
func (at Instant) Back(wall int64) Instant {
	return Instant{Wall: wall, Mono: AddSat(at.Mono, -SubSat(at.Wall, wall))}
}

// At returns the moment mono on the monotonic timeline (at or before at.mono), with its
// wall-clock time as far before at.wall as it is before at.mono: when a move that time
// made happened, read when it is noticed.
func (at Instant) At(mono int64) Instant {
	return Instant{Wall: SubSat(at.Wall, SubSat(at.Mono, mono)), Mono: mono}
}

// CoarseNow reads the coarse clock, starting its ticker if it is stopped.
func CoarseNow() int64 {
	if n := atomic.LoadInt64(&Coarse.Nanos); n != 0 {
		return n
	}
	return Coarse.start()
}

func (c *coarseClock) start() int64 {
	now := MonoOf(time.Now())
	c.mu.Lock()
	if !c.running {
		c.running = true
		atomic.StoreInt64(&c.Nanos, now)
		go c.run()
	}
	c.mu.Unlock()
	return now
}

func (c *coarseClock) run() {
	t := time.NewTicker(CoarseTick)
	defer t.Stop()
	for range coarseLifetime {
		<-t.C
		atomic.StoreInt64(&c.Nanos, MonoOf(time.Now()))
	}
	c.mu.Lock()
	atomic.StoreInt64(&c.Nanos, 0)
	c.running = false
	c.mu.Unlock()
}

// Reader is how a breaker reads an injected Clock, on the same two timelines: wall time
// from Now, and a monotonic timeline anchored at the clock's first reading (base, its wall
// time) that moves by the clock's Monotonic readings if it has them, and otherwise by the
// difference between Now readings, which Go computes on the monotonic clock when both
// carry one (time.Now's do) and on the wall clock when not.
type Reader struct {
	c     Clock
	mc    monotonicClock // c, when it has Monotonic
	t0    time.Time
	mono0 time.Duration
	base  int64
}

// NewReader returns a Reader of c, its monotonic timeline anchored at this reading.
func NewReader(c Clock) *Reader {
	r := &Reader{c: c, t0: c.Now()}
	r.base = r.t0.UnixNano()
	if mc, ok := c.(monotonicClock); ok {
		r.mc, r.mono0 = mc, mc.Monotonic()
	}
	return r
}

// Mono reads the monotonic timeline.
func (r *Reader) Mono() int64 {
	if r.mc != nil {
		return AddSat(r.base, int64(r.mc.Monotonic()-r.mono0))
	}
	return AddSat(r.base, int64(r.c.Now().Sub(r.t0)))
}

// Instant reads both timelines at once.
func (r *Reader) Instant() Instant {
	t := r.c.Now()
	if r.mc != nil {
		return Instant{Wall: t.UnixNano(), Mono: r.Mono()}
	}
	return Instant{Wall: t.UnixNano(), Mono: AddSat(r.base, int64(t.Sub(r.t0)))}
}

// AddSat is a + b, saturated.
func AddSat(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	if b < 0 && a < math.MinInt64-b {
		return math.MinInt64
	}
	return a + b
}

// SubSat is a - b, saturated.
func SubSat(a, b int64) int64 {
	if b == math.MinInt64 {
		if a >= 0 {
			return math.MaxInt64
		}
		return a - b
	}
	return AddSat(a, -b)
}
