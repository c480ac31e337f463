package breaker

import (
	"errors"
	"time"
)

// What a breaker learns from, and tells, the fleet it belongs to: the operator publishes how
// many pods report a breaker and what a typical one's window holds (rendered `fleet`,
// docs/design.md §4), and each pod reports its own window's traffic for the operator to
// rank and add up.

// Fleet is what the operator publishes about the pods that report a breaker.
// pkg/breaker/kube calls [Breaker.SetFleet] with it on every config it applies.
type Fleet struct {
	// Pods is the number of pods reporting the breaker; 0 means not known yet, which the
	// retry budget takes as 1 (this pod has the whole floor until it hears otherwise).
	Pods int
	// Requests and Accepts are the window a pod with too few requests of its own
	// throttles on (§5.16): the operator publishes the median reporting pod's, so that
	// one pod's report cannot set the rejection of every quiet pod (§5.17).
	Requests, Accepts int64
	// Baseline is the fleet's baseline latency of the dependency, which an adaptive
	// concurrency limit's own may not exceed (§5.18): the operator publishes the median
	// of the baselines the pods report (Traffic.Baseline). 0: none published, and each
	// pod goes by its own.
	Baseline time.Duration
}

// Traffic is what a breaker's window holds for the fleet's arithmetic (§5.15, §5.16,
// §5.18), and what the fleet last told it.
type Traffic struct {
	// Requests are the calls the closed breaker was asked to run: admitted (counted when
	// they finish as a success or a failure; a call whose caller gave up counts for
	// nothing, as in the failure window) or throttled.
	Requests int64
	// Accepts are the requests that succeeded.
	Accepts int64
	// Retries are the second or later attempts of a logical call that the retry budget
	// allowed ([Breaker.AllowRetry]).
	Retries int64
	// Throttled are the calls adaptive throttling rejected.
	Throttled int64

	// The concurrency limit's figures (§5.18), whatever the circuit's state; all 0
	// without Policy.MaxInFlight.
	//
	// Limit is the limit on calls in flight in force: MaxInFlight, or with Adaptive the
	// limit under it.
	Limit int
	// InFlightPeak is the most calls in flight at once over the window (the
	// epoch-aligned, window-wide span live now and the one before it, cut as the failure
	// window's buckets are), as the calls admitted in it saw them, and at least those in
	// flight now: a report written at least once a window covers every moment since the
	// one before.
	InFlightPeak int64
	// Limited are the calls the concurrency limit refused over the same spans.
	Limited int64
	// Baseline is the adaptive limiter's baseline latency (at most Fleet.Baseline, see
	// AdaptiveConcurrency), what the operator takes the fleet's median of; 0 without
	// Adaptive or before it has learnt one.
	Baseline time.Duration

	// Fleet is what SetFleet last stored; zero until then.
	Fleet Fleet
}

var (
	// ErrRetryBudget is matched by the error of a retry the budget refused; the error
	// also wraps the last attempt's.
	ErrRetryBudget = errors.New("breaker: retry budget spent")
	// ErrThrottled is matched, together with ErrOpen, by the error of a call adaptive
	// throttling rejected.
	ErrThrottled = errors.New("breaker: call throttled")
)

// SetFleet tells the breaker what the operator last published about its fleet. It costs the
// call path nothing; pkg/breaker/kube calls it on every config it applies, and tests or other
// sources may call it directly. Negative counts and baselines count as 0, and Accepts at
// most Requests: accepts are among the requests, and more of them would switch throttling
// off. [Breaker.Traffic] returns what it stored (Traffic.Fleet).
func (b *Breaker) SetFleet(f Fleet) {
	f.Pods = max(f.Pods, 0)
	f.Requests = max(f.Requests, 0)
	f.Accepts = min(max(f.Accepts, 0), f.Requests)
	f.Baseline = max(f.Baseline, 0)
	b.fleet.Store(&f)
	b.mu.Lock()
	b.armThrottle() // a quiet pod throttles on these figures
	b.mu.Unlock()
}

// Traffic returns what the breaker's window holds for the fleet (see [Traffic]). While the
// circuit is open or half-open its window figures are zero: the window is the closed
// state's. Requests are the calls asked of the closed breaker: the failure window's
// recorded calls (counted when they finish, as successes or failures; a call whose caller
// gave up counts for nothing) and the calls throttling refused; Accepts are the window's
// successes. With a retry budget or throttling configured, Retries are the retries
// AllowRetry allowed and Throttled the calls throttling refused; without, both are 0. The
// concurrency limit's figures and the fleet's are filled in whatever the state.
func (b *Breaker) Traffic() Traffic {
	now := b.now()
	var tr Traffic
	if f := b.fleet.Load(); f != nil {
		tr.Fleet = *f
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if l := b.lim; l != nil && b.policy.MaxInFlight > 0 {
		tr.Limit = int(l.limit.Load())
		tr.InFlightPeak, tr.Limited = l.figures(now)
		tr.Baseline = l.baseline()
	}
	if b.state != Closed {
		return tr
	}
	b.roll(now)
	c := b.windowCounts()
	tr.Requests, tr.Accepts = c.Calls, c.Calls-c.Failures
	if b.tally != nil {
		_, t := b.tally.window(now, b.bucket.Load())
		tr.Requests += t.throttled
		tr.Retries, tr.Throttled = t.retries, t.throttled
	}
	return tr
}
