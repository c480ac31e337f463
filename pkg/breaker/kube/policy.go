package kube

import (
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// The conversions between the published document and the library's types live here, on
// the side that reads the document into breakers: the wire (breakerconfig) imports nothing
// of the library, so that the API types can import it without pulling the breaker in
// (docs/design.md §1).

// PolicyOf returns the breaker policy a published document describes. A document that
// Parse accepted, or whose Validate passes, always converts; any other gets the error of
// Validate, which names the field. A concurrency limit's MaxInFlight is the published
// share, the limit of a pod the operator counted; the agent lowers it for a pod started
// since (docs/design.md §12).
func PolicyOf(c breakerconfig.Config) (breaker.Policy, error) {
	if err := c.Validate(); err != nil {
		return breaker.Policy{}, err
	}
	p := policyOf(c.Policy)
	p.Mode = breaker.Mode(c.Mode)
	// Fresh values, never c's: a policy handed to a breaker shares nothing with a config
	// the caller may still change.
	if b := c.RetryBudget; b != nil {
		p.RetryBudget = &breaker.RetryBudget{Percent: b.Percent, MinPerSecond: b.MinPerSecond}
	}
	if t := c.Throttle; t != nil {
		p.Throttle = &breaker.Throttle{K: t.K}
	}
	// The share as told: a pod the division did not count yet runs a smaller limit, which
	// the agent sets (concurrency.go).
	if k := c.Concurrency; k != nil {
		p.MaxInFlight, p.MaxWait = k.Share, time.Duration(k.MaxWait)
		if a := k.Adaptive; a != nil {
			p.Adaptive = &breaker.AdaptiveConcurrency{Tolerance: a.Tolerance, MinLimit: a.MinLimit}
		}
	}
	// The document's rules are the breaker's and more (no field may be zero), so this
	// only guards against the two drifting apart, which FuzzPolicyOf looks for.
	if err := p.Validate(); err != nil {
		return breaker.Policy{}, err
	}
	return p, nil
}

// ConfigOf returns the document that publishes p under name: what the operator would
// render for a CircuitBreaker whose spec is p, with the given generation and scope and no
// fleet verdict or counts (a MaxInFlight is published as the share of a fleet of which no
// pod is counted yet, so that every reader's limit is MaxInFlight). Tests write ConfigMaps
// with it; fuseboxd shows a breaker's policy in force with it.
func ConfigOf(name string, generation int64, p breaker.Policy, scope string) breakerconfig.Config {
	mode := p.Mode
	if mode == "" {
		mode = breaker.ModeEnforce
	}
	c := breakerconfig.Config{Name: name, Generation: generation, Policy: wirePolicy(p), Mode: string(mode), Scope: scope}
	if b := p.RetryBudget; b != nil {
		c.RetryBudget = &breakerconfig.RetryBudget{Percent: b.Percent, MinPerSecond: b.MinPerSecond}
	}
	if t := p.Throttle; t != nil {
		c.Throttle = &breakerconfig.Throttle{K: t.K}
	}
	if p.MaxInFlight > 0 {
		c.Concurrency = &breakerconfig.Concurrency{Share: p.MaxInFlight, Generation: 1, MaxWait: breakerconfig.Duration(p.MaxWait)}
		if a := p.Adaptive; a != nil {
			// The zero fields the library reads as its defaults, which the document spells.
			w := breakerconfig.AdaptiveConcurrency{Tolerance: a.Tolerance, MinLimit: a.MinLimit}
			if w.Tolerance == 0 {
				w.Tolerance = breakerconfig.DefaultAdaptiveTolerance
			}
			if w.MinLimit == 0 {
				w.MinLimit = breakerconfig.DefaultAdaptiveMinLimit
			}
			c.Concurrency.Adaptive = &w
		}
	}
	return c
}

// policyOf is the breaker policy of a published one, the enforced or a candidate's.
func policyOf(w breakerconfig.Policy) breaker.Policy {
	p := breaker.Policy{
		OpenTimeout:            time.Duration(w.OpenTimeout),
		Window:                 time.Duration(w.Window),
		FailureRatio:           w.FailureRatio,
		MinimumThroughput:      w.MinimumThroughput,
		SuccessThreshold:       w.SuccessThreshold,
		HalfOpenPermittedCalls: w.HalfOpenPermittedCalls,
		SlowCallDuration:       time.Duration(w.SlowCallDuration),
		SlowCallRatio:          w.SlowCallRatio,
		MaxOpenTimeout:         time.Duration(w.MaxOpenTimeout),
	}
	if p.SlowCallRatio == 0 {
		// Left out of the document, as the operator does without slowCallDuration; said
		// here, the policy reads as the one in force (Breaker.Policy).
		p.SlowCallRatio = breaker.DefaultPolicy().SlowCallRatio
	}
	return p
}

// wirePolicy is p as the operator would publish it: the slow-call ratio only with the
// duration that makes it mean something.
func wirePolicy(p breaker.Policy) breakerconfig.Policy {
	w := breakerconfig.Policy{FailureRatio: p.FailureRatio, MinimumThroughput: p.MinimumThroughput,
		SuccessThreshold: p.SuccessThreshold, HalfOpenPermittedCalls: p.HalfOpenPermittedCalls}
	w.OpenTimeout, w.Window = breakerconfig.Duration(p.OpenTimeout), breakerconfig.Duration(p.Window)
	w.MaxOpenTimeout = breakerconfig.Duration(p.MaxOpenTimeout)
	if p.SlowCallDuration > 0 {
		w.SlowCallDuration, w.SlowCallRatio = breakerconfig.Duration(p.SlowCallDuration), p.SlowCallRatio
	}
	return w
}

// fleetOf is what the operator counted of the fleet, as the library takes it: the counts
// of a breaker with a retry budget or throttling (withTraffic), and the baseline latency
// of one with a concurrency limit. false when c carries neither.
func fleetOf(c *breakerconfig.Config, withTraffic bool) (breaker.Fleet, bool) {
	var f breaker.Fleet
	counted := false
	if w := c.Fleet; withTraffic && w != nil {
		f.Pods, f.Requests, f.Accepts = w.Pods, w.Requests, w.Accepts
		counted = true
	}
	if k := c.Concurrency; k != nil {
		f.Baseline = time.Duration(k.Baseline)
		counted = true
	}
	return f, counted
}

// stateOf reads a state as the wire spells it (a verdict's, a report's), and false for
// any other word.
func stateOf(s string) (breaker.State, bool) {
	switch s {
	case breakerconfig.StateClosed:
		return breaker.Closed, true
	case breakerconfig.StateOpen:
		return breaker.Open, true
	case breakerconfig.StateHalfOpen:
		return breaker.HalfOpen, true
	}
	return 0, false
}
