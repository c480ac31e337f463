// Package breaker protects a process from a failing dependency by short-circuiting calls to
// it once too large a share of recent calls have failed, and by letting a few probes through
// later to learn whether it has recovered.
//
// A [Breaker] judges the failure rate over a rolling window of two epoch-aligned buckets,
// opens when the rate reaches [Policy.FailureRatio] over at least
// [Policy.MinimumThroughput] calls, stays open for [Policy.OpenTimeout], then admits at most
// [Policy.HalfOpenPermittedCalls] concurrent probes until [Policy.SuccessThreshold]
// consecutive successes close it again. A rate rather than a run of consecutive failures is
// judged because a count mostly measures how many calls were in flight when something broke.
//
// The call path is built to cost almost nothing: a closed circuit admits and records a
// successful call with a couple of atomic operations and no lock, and an open circuit refuses
// with one atomic load and a comparison. To get there the breaker does not read the wall
// clock per call; unless a [Clock] is injected it reads a shared coarse clock refreshed about
// once a millisecond, so bucket boundaries and the open timeout are observed up to about a
// millisecond late (never early). Durations (windows, open periods) are measured on the
// monotonic clock, so a step of the wall clock changes none of them; timestamps that leave
// the process ([observe.Transition].At, [Verdict].Since) are wall-clock time.
//
// What processes share is the [Verdict] (a state and when it was reached), never the
// counters: adapters publish it from an observer and apply remote ones with
// [Breaker.Adopt], off the call path.
//
// Beside this package, one package per job: pkg/breaker/observe is what a breaker tells
// those watching it (transitions, calls, retries; [WithObserver] takes its Observer), and
// pkg/breaker/registry holds many breakers (a Registry of named breakers that hot-reloads
// their policies, and a Group of one breaker per key).
//
// Besides opening and closing, a policy may budget retries ([Policy.RetryBudget]: [Retry] and
// [Breaker.AllowRetry] retry only while retries stay a share of first attempts plus a
// fleet-wide floor) and throttle adaptively ([Policy.Throttle]: a closed breaker refuses
// locally the share of calls its dependency has been turning away). Both count on a
// lock-free tally of the window, and both learn from the fleet the operator describes with
// [Breaker.SetFleet]; a policy with neither counts nothing more per call.
//
// A policy may also limit the calls in flight ([Policy.MaxInFlight], a pod's share of a
// limit for the whole fleet): a call over it waits up to [Policy.MaxWait] for a slot and is
// then refused with [ErrConcurrencyLimited], which is neither a failure nor a short-circuit
// of the circuit. With [Policy.Adaptive] the limit falls below the share while the
// dependency slows, its baseline capped by the fleet's ([Fleet].Baseline) so that it does
// not drift up during a long incident. A breaker without a limit pays nothing for it.
//
// Every exported method is safe for concurrent use.
package breaker
