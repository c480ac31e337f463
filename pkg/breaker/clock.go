package breaker

import (
	"sync"
	"sync/atomic"
	"time"
)

// The call path must not read the wall clock: time.Now costs about as much as everything
// else a closed breaker does per call put together. Breakers without an injected Clock read
// this coarse clock instead, a Unix-nanosecond value a ticker goroutine refreshes every
// coarseTick while breakers are in use.
//
// What that trades: a reading is up to one tick old (more if the scheduler delays the
// ticker), so an outcome near a bucket boundary may land in the earlier bucket and an open
// circuit goes half-open up to about a millisecond after openTimeout — late, never early.
// Transition timestamps (Transition.At, Verdict.Since) read the wall clock exactly.
const (
	coarseTick = time.Millisecond
	// The ticker stops after this many ticks, and the next reading starts a new one. That
	// keeps an idle process from waking a thousand times a second for nothing without
	// readers having to write anything to say they are still there: a busy process pays one
	// goroutine start per second.
	coarseLifetime = 1000
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

// coarseNow is small enough to inline into the call path.
func coarseNow() int64 {
	if n := atomic.LoadInt64(&coarse.nanos); n != 0 {
		return n
	}
	return coarse.start()
}

func (c *coarseClock) start() int64 {
	now := time.Now().UnixNano()
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
		atomic.StoreInt64(&c.nanos, time.Now().UnixNano())
	}
	c.mu.Lock()
	atomic.StoreInt64(&c.nanos, 0)
	c.running = false
	c.mu.Unlock()
}
