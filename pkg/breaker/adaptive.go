package breaker

import (
	"math"
	"time"
)

// The adaptive concurrency limit (docs/design.md §5.18): a gradient limiter in the manner
// of Netflix's Gradient2, under the pod's share of the fleet's limit. Each call that
// ends adds its latency to the limiter's word in the same atomic addition that gives its
// slot back; about once a second (foldEvery, once foldSamples calls have ended) one of
// them folds the samples into the limiter's state under its own lock, taken with TryLock
// so that no call ever waits:
//
//	recent   = the mean latency of the calls folded
//	baseline ← an exponentially weighted mean of recent over longWindow, at most the
//	           fleet's baseline (Fleet.Baseline) when the operator publishes one
//	gradient = clamp(Tolerance × baseline / recent, 0.5, 1)
//	limit    ← limit × (1 − smoothing) + limit × (gradient + allowance) × smoothing,
//	           within [MinLimit, MaxInFlight]
//
// The allowance lets the limit grow back while the dependency answers at its baseline
// (gradient 1), by a share of the limit a fold, so that it moves a pod's share of a few
// calls as surely as one of thousands: a fixed allowance (Gradient2's queue size) would
// also stop every cut at twice its size, above the share of a pod of a large fleet. It
// is withheld from a pod using under half its limit, whose latency says nothing about a
// higher one. The limit settles where gradient × limit + allowance = limit, that is where
// the dependency answers in Tolerance / (1 − allowance) times its baseline.
//
// Why the baseline's cap: a limiter alone learns its baseline from the latency it sees, so
// during an incident that lasts longer than its long window the baseline climbs to the
// incident's latency, the gradient returns to 1 and the limit grows back into the overload
// it was cutting. The fleet's baseline is the median of the baselines the pods report
// (Traffic.Baseline), each of them capped the same way, so it holds what the dependency
// answered in before the incident for as long as the incident lasts, and a pod started
// during one inherits it. The cap is lifted for a pod whose limit has sat at its floor for
// a whole long window: cutting has done all it can, and the slowness is then the
// dependency's own speed (a slower release, say), which the baseline must learn or the
// limit would stay at its floor for good. A pod whose cap is lifted reports its own
// baseline, so the fleet's follows once most pods agree, and the cap returns once the
// fleet's has caught up with the pod's.

const (
	foldEvery   = time.Second // how often the limit is reconsidered
	foldSamples = 10          // and only once this many calls have ended
	longWindow  = time.Minute // the baseline's time constant
	smoothing   = 0.2         // the share of a fold's new limit taken at once
	allowance   = 1.0 / 16    // the growth allowance per fold, as a share of the limit
	minGradient = 0.5         // the most one fold cuts
	// The samples' bits in limiter.word are drained when half of the count's are used,
	// or the sum's top bit; a sample counts as at most about a minute, so that the sum's
	// other half has room for the releases that race a drain.
	drainCount      = 1 << (sampleCountBits - 1) << inFlightBits
	maxSampleMicros = 1 << 26
)

// gradient is the adaptive limiter's state, guarded by the limiter's mu.
type gradient struct {
	tolerance, minLimit, ceiling float64
	estimate                     float64 // the limit, before rounding down
	baseline                     float64 // ns; 0 until the first fold
	lastFold                     int64
	// sum (µs) and count are the samples drained since the last fold.
	sum, count float64
	// floorSince is when the limit reached its floor, 0 while above it. released says
	// the limit sat there for a whole long window, and the fleet's baseline no longer
	// caps this pod's until it has caught up with it.
	floorSince int64
	released   bool
}

func newGradient(ceiling float64, now int64) *gradient {
	return &gradient{estimate: ceiling, ceiling: ceiling, lastFold: now}
}

// configure applies a policy's parameters; a lower ceiling lowers the limit at once, a
// higher one is grown into.
func (g *gradient) configure(a *AdaptiveConcurrency, ceiling float64) {
	g.tolerance, g.minLimit, g.ceiling = a.Tolerance, float64(a.MinLimit), ceiling
	g.estimate = g.clamp(g.estimate)
}

func (g *gradient) clamp(est float64) float64 {
	return max(min(est, g.ceiling), min(g.minLimit, g.ceiling))
}

// limit is the limit in force: the estimate rounded down.
func (g *gradient) limit() int64 { return int64(g.estimate) }

// releaseSampled gives back the slot of a call that took latency and ended at now, adds
// the latency to the samples in the same atomic addition (limiter.word), and drains the
// samples when a fold is due or they fill their bits.
func (l *limiter) releaseSampled(latency, now int64) {
	us := uint64(min(max(latency, 0)/1e3, maxSampleMicros))
	v := l.word.Add(us<<sampleSumShift + sampleOne - 1)
	n := int64(v&inFlightMask) + 1 // in flight until this call ended
	if now >= l.spanEnd.Load() || n > l.spanMax.Load() {
		l.raisePeak(n, now)
	}
	if l.waiters.Load() != 0 {
		l.wakeOne()
	}
	if now >= l.nextFold.Load() || v&sampleCountMask >= drainCount || v>>63 != 0 {
		l.drain(now, n)
	}
}

// drain takes the samples out of the word and, when a fold is due, folds them: it
// reconsiders the limit on the calls ended since the last fold. inFlight is how many calls
// were in flight until the call that drains ended: whether the pod uses its limit.
// Another call draining already makes it return at once.
func (l *limiter) drain(now, inFlight int64) {
	if !l.mu.TryLock() {
		return
	}
	defer l.mu.Unlock()
	g := l.grad
	if g == nil {
		return
	}
	// Subtract exactly what was read: releases adding meanwhile keep theirs.
	v := l.word.Load() &^ inFlightMask
	l.word.Add(-v)
	g.sum += float64(v >> sampleSumShift)
	g.count += float64((v & sampleCountMask) >> inFlightBits)
	switch {
	case now < l.nextFold.Load():
		return // drained to make room; not yet time to fold
	case g.count < foldSamples:
		// Too few calls yet: look again a tenth of the interval later, not on every call.
		l.nextFold.Store(now + int64(foldEvery)/10)
		return
	}
	l.nextFold.Store(now + int64(foldEvery))
	recent := max(g.sum*1e3/g.count, 1)
	g.sum, g.count = 0, 0
	var fleet float64
	if f := l.fleet.Load(); f != nil {
		fleet = float64(f.Baseline)
	}
	g.fold(recent, fleet, float64(inFlight), now)
	l.limit.Store(g.limit())
}

// fold is one step of the limiter (see the top of the file).
func (g *gradient) fold(recent, fleet, inFlight float64, now int64) {
	elapsed := float64(max(now-g.lastFold, 0))
	g.lastFold = now
	if g.baseline == 0 {
		g.baseline = recent
	} else {
		g.baseline += (recent - g.baseline) * (1 - math.Exp(-elapsed/float64(longWindow)))
		if g.baseline > 2*recent {
			// The dependency got much faster than its baseline (an incident ended, or
			// the baseline was learnt under load): follow it down quickly.
			g.baseline *= 0.95
		}
	}
	if g.floorSince != 0 && now-g.floorSince >= int64(longWindow) {
		g.released = true
	}
	if g.released && g.baseline <= fleet || fleet == 0 {
		g.released = false // the fleet's baseline has caught up, or there is none
	}
	if fleet > 0 && !g.released {
		g.baseline = min(g.baseline, fleet)
	}
	grad := max(min(g.tolerance*g.baseline/recent, 1), minGradient)
	next := g.estimate * (grad + allowance)
	if inFlight < g.estimate/2 {
		next = min(next, g.estimate)
	}
	g.estimate = g.clamp(g.estimate*(1-smoothing) + next*smoothing)
	switch {
	case g.limit() > int64(min(g.minLimit, g.ceiling)):
		g.floorSince = 0
	case g.floorSince == 0:
		g.floorSince = now
	}
}

// baseline is the adaptive limiter's baseline latency, 0 without one or before its first
// fold.
func (l *limiter) baseline() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.grad == nil {
		return 0
	}
	return time.Duration(l.grad.baseline)
}
