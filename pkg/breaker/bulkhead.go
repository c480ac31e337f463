package breaker

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker/internal/core"
)

// The concurrency limit (docs/design.md §5.18): a pod's share of a fleet-wide limit on
// calls in flight, enforced on the call path by a counter of slots. It is a bulkhead, not a
// judgement of the dependency: a call it refuses never ran, so it is neither a failure nor
// a success, it is not recorded in the window, and it is no short-circuit of the circuit
// (ErrConcurrencyLimited, not ErrOpen). Every call the circuit admits takes a slot, closed
// calls and half-open probes alike, and gives it back when it ends; the circuit is asked
// first, so that an open circuit refuses on its own test without touching the counter.

// ErrConcurrencyLimited is matched by the error of a call refused because the breaker's
// limit on calls in flight was reached ([Policy.MaxInFlight]) and no slot came free within
// [Policy.MaxWait]. It does not match ErrOpen: the circuit did not refuse the call, and the
// refusal is not a failure (docs/semantics.md, "Concurrency limit"). When the caller's
// context ended during the wait, the error matches its error too.
var ErrConcurrencyLimited = errors.New("breaker: concurrency limit reached")

// limitError is the error of a call the concurrency limit refused. A breaker builds one per
// state up front, so that refusing allocates nothing; only a refusal because the caller's
// context ended while waiting allocates one, to carry the context's error.
type limitError struct {
	breaker string
	state   State // the state of the circuit that admitted the call the limit then refused
	cause   error // the context's error when the caller gave up waiting; nil otherwise
}

func (e *limitError) Error() string {
	s := "breaker " + quote(e.breaker) + ": concurrency limit reached"
	if e.cause != nil {
		s += " (gave up waiting: " + e.cause.Error() + ")"
	}
	return s
}

// Is makes errors.Is(err, ErrConcurrencyLimited) hold, and nothing else but the cause.
func (e *limitError) Is(target error) bool { return target == ErrConcurrencyLimited }

// Unwrap returns the context's error of a caller that gave up waiting.
func (e *limitError) Unwrap() error { return e.cause }

var _ error = (*limitError)(nil)

// limiter counts a breaker's calls in flight against its limit. A breaker has at most one,
// made when a policy first sets MaxInFlight and kept for the breaker's life, so that calls
// admitted under an earlier policy give their slots back to the counter they took them
// from: every call admitted in a period whose lim is set holds a slot of it.
type limiter struct {
	// The call path's words, on one line: every admission and release writes word and
	// reads limit and waiters, and a release reads the live span's end and peak.
	//
	// word packs the calls in flight (the low inFlightBits) with the adaptive limiter's
	// samples above them (adaptive.go): the count of calls ended since the last fold
	// (sampleCountBits) and the sum of their latencies in µs (the top 32 bits). A release
	// gives its slot back and adds its sample in one atomic addition: on the machines we
	// measure, each atomic read-modify-write costs about as much as the rest of a closed
	// call, and a limit cannot do with fewer than two (docs/benchmarks.md).
	word    atomic.Uint64
	limit   atomic.Int64 // the limit in force: MaxInFlight, or the adaptive one under it
	waiters atomic.Int32 // calls waiting for a slot (MaxWait)
	// The live span of what Traffic reports (InFlightPeak, Limited): window-wide spans
	// aligned to the Unix epoch like the failure window's buckets. spanEnd is where the
	// live one ends; spanMax is the most calls in flight at once in it, as the calls
	// that ended in it saw them (release); spanLimited the calls the limit refused in it.
	spanEnd, spanMax, spanLimited atomic.Int64
	// nextFold is when the adaptive limiter next reconsiders the limit (adaptive.go).
	nextFold atomic.Int64
	_        [64]byte

	// spanMu serialises the rolls of the live span, and guards what they keep.
	spanMu sync.Mutex
	// The live span's index (floor(start / width)) and width, and the totals of the
	// span before it: 0 when that one saw nothing.
	spanIdx, spanWidth   int64
	prevMax, prevLimited int64

	// wake hands a freed slot's news to one waiter; a waiter that takes a slot passes it
	// on while there is room (wait).
	wake chan struct{}
	// newTimer makes the timer of a wait; tests replace it to end waits by hand.
	newTimer func(time.Duration) (<-chan time.Time, func() bool)

	mu sync.Mutex // guards grad, and serialises configure with the folds
	// grad is the adaptive limiter's state; nil without Policy.Adaptive.
	grad *gradient
	// fleet is the breaker's, for the fleet's baseline.
	fleet *atomic.Pointer[Fleet]
}

func newLimiter(fleet *atomic.Pointer[Fleet]) *limiter {
	return &limiter{wake: make(chan struct{}, 1), newTimer: realTimer, fleet: fleet}
}

func realTimer(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}

// configure applies a policy with MaxInFlight set: the limit's ceiling, the adaptive
// limiter's parameters, and the width of the reported spans (the window's). Caller holds
// the breaker's mu.
func (l *limiter) configure(p *Policy, now int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ceiling := min(int64(p.MaxInFlight), maxCounted)
	if a := p.Adaptive; a != nil {
		if l.grad == nil {
			l.grad = newGradient(float64(ceiling), now)
			l.nextFold.Store(core.AddSat(now, int64(foldEvery)))
		}
		l.grad.configure(a, float64(ceiling))
		l.limit.Store(l.grad.limit())
	} else {
		l.grad = nil
		l.nextFold.Store(maxInt64)
		l.limit.Store(ceiling)
	}
	l.spanMu.Lock()
	if w := int64(p.Window); l.spanWidth != w {
		// A new width re-cuts the spans from now: what the old ones held is forgotten,
		// as rarely as the window's width changes.
		l.spanWidth, l.spanIdx = w, floorDiv(now, w)
		l.prevMax, l.prevLimited = 0, 0
		l.spanMax.Store(l.inFlight())
		l.spanLimited.Store(0)
		l.spanEnd.Store(mulSat(l.spanIdx+1, w))
	}
	l.spanMu.Unlock()
	if l.waiters.Load() != 0 {
		l.wakeOne() // a higher limit may have room for a waiter now
	}
}

const maxInt64 = 1<<63 - 1

// The packing of limiter.word.
const (
	inFlightBits    = 20
	inFlightMask    = 1<<inFlightBits - 1
	maxCounted      = inFlightMask // the highest limit counted: a higher MaxInFlight is this
	sampleCountBits = 12
	sampleOne       = 1 << inFlightBits // one sample in the count
	sampleCountMask = (1<<sampleCountBits - 1) << inFlightBits
	sampleSumShift  = inFlightBits + sampleCountBits // the sum of latencies, in µs
)

// inFlight returns the calls in flight.
func (l *limiter) inFlight() int64 { return int64(l.word.Load() & inFlightMask) }

// tryAcquire takes a slot if the limit leaves one. It compares and swaps rather than adds
// and takes back, which would cost the same uncontended but could make a call that
// finds the limit reached turn away another that would have fitted.
func (l *limiter) tryAcquire() bool {
	for {
		w := l.word.Load()
		if int64(w&inFlightMask) >= l.limit.Load() {
			return false
		}
		if l.word.CompareAndSwap(w, w+1) {
			return true
		}
	}
}

// raisePeak notes n calls in flight at now, n above the live span's peak or now past its
// end.
func (l *limiter) raisePeak(n, now int64) {
	l.roll(now)
	for {
		m := l.spanMax.Load()
		if n <= m || l.spanMax.CompareAndSwap(m, n) {
			return
		}
	}
}

// release gives a slot back at now, and notes for the reported peak how many calls were in
// flight until then. The peak is taken as calls end rather than as they start, where the
// call path reads the clock anyway: the most calls in flight at once is the count just
// before the first release after the admission that reached it (any admission in
// between would have reached more), and calls that have not ended are counted by
// figures, so no peak is missed; it is only dated when it ended.
func (l *limiter) release(now int64) {
	if n := int64(l.word.Add(^uint64(0))&inFlightMask) + 1; now >= l.spanEnd.Load() || n > l.spanMax.Load() {
		l.raisePeak(n, now)
	}
	if l.waiters.Load() != 0 {
		l.wakeOne()
	}
}

func (l *limiter) wakeOne() {
	select {
	case l.wake <- struct{}{}:
	default: // a wake-up is pending already; its waiter passes it on
	}
}

// refused counts a call the limit refused, in the span of now.
func (l *limiter) refused(now int64) {
	l.roll(now)
	l.spanLimited.Add(1)
}

// roll moves the live span to the one that holds now, when now has left it; a reading
// older than the live span (a clock reading a tick late) counts in it. A new span starts
// with the calls in flight as its peak: they were in flight in it. A count that races the
// roll may land in the span either side of it, which a figure over two spans does not
// notice.
func (l *limiter) roll(now int64) {
	if now < l.spanEnd.Load() {
		return
	}
	l.spanMu.Lock()
	defer l.spanMu.Unlock()
	if now < l.spanEnd.Load() {
		return
	}
	idx := floorDiv(now, l.spanWidth)
	peak, limited := l.spanMax.Swap(l.inFlight()), l.spanLimited.Swap(0)
	if idx == l.spanIdx+1 {
		l.prevMax, l.prevLimited = peak, limited
	} else {
		l.prevMax, l.prevLimited = 0, 0
	}
	l.spanIdx = idx
	l.spanEnd.Store(mulSat(idx+1, l.spanWidth))
}

// figures returns what Traffic reports of the calls in flight at now: the most at once
// over the live span and the one before it (at least those in flight now), and the calls
// the limit refused over the same.
func (l *limiter) figures(now int64) (peak, limited int64) {
	l.roll(now)
	l.spanMu.Lock()
	defer l.spanMu.Unlock()
	peak = max(l.spanMax.Load(), l.prevMax, l.inFlight())
	return peak, l.spanLimited.Load() + l.prevLimited
}

// wait waits up to d for a slot, or until ctx ends (ctx nil: it never does). It reports
// whether it took one, and the context's error if that ended the wait.
// Waiters are not served in order: each freed slot wakes one of them, which takes it if no
// new call took it first.
func (l *limiter) wait(ctx context.Context, d time.Duration) (ok bool, cause error) {
	l.waiters.Add(1)
	defer l.waiters.Add(-1)
	// waiters is counted before this try, so a slot freed after it sends a wake-up.
	if l.tryAcquire() {
		return true, nil
	}
	timeout, stop := l.newTimer(d)
	defer stop()
	var done <-chan struct{}
	if ctx != nil {
		done = ctx.Done()
	}
	for {
		select {
		case <-l.wake:
			if l.tryAcquire() {
				if l.waiters.Load() > 1 && l.inFlight() < l.limit.Load() {
					l.wakeOne() // room for another waiter: pass the news on
				}
				return true, nil
			}
		case <-timeout:
			return l.tryAcquire(), nil
		case <-done:
			return false, ctx.Err()
		}
	}
}
