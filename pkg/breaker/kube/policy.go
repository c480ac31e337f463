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
// Validate, which names the field.
func PolicyOf(c breakerconfig.Config) (breaker.Policy, error) {
	if err := c.Validate(); err != nil {
		return breaker.Policy{}, err
	}
	p := breaker.Policy{
		OpenTimeout:            time.Duration(c.OpenTimeout),
		Window:                 time.Duration(c.Window),
		FailureRatio:           c.FailureRatio,
		MinimumThroughput:      c.MinimumThroughput,
		SuccessThreshold:       c.SuccessThreshold,
		HalfOpenPermittedCalls: c.HalfOpenPermittedCalls,
		Mode:                   breaker.Mode(c.Mode),
		SlowCallDuration:       time.Duration(c.SlowCallDuration),
		SlowCallRatio:          c.SlowCallRatio,
		MaxOpenTimeout:         time.Duration(c.MaxOpenTimeout),
	}
	if p.SlowCallRatio == 0 {
		// Left out of the document, as the operator does without slowCallDuration; said
		// here, the policy reads as the one in force (Breaker.Policy).
		p.SlowCallRatio = breaker.DefaultPolicy().SlowCallRatio
	}
	// Fresh values, never c's: a policy handed to a breaker shares nothing with a config
	// the caller may still change.
	if b := c.RetryBudget; b != nil {
		p.RetryBudget = &breaker.RetryBudget{Percent: b.Percent, MinPerSecond: b.MinPerSecond}
	}
	if t := c.Throttle; t != nil {
		p.Throttle = &breaker.Throttle{K: t.K}
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
// fleet verdict or counts. Tests write ConfigMaps with it; fuseboxd shows a breaker's policy
// in force with it.
func ConfigOf(name string, generation int64, p breaker.Policy, scope string) breakerconfig.Config {
	mode := p.Mode
	if mode == "" {
		mode = breaker.ModeEnforce
	}
	c := breakerconfig.Config{
		Name:                   name,
		Generation:             generation,
		OpenTimeout:            breakerconfig.Duration(p.OpenTimeout),
		Window:                 breakerconfig.Duration(p.Window),
		FailureRatio:           p.FailureRatio,
		MinimumThroughput:      p.MinimumThroughput,
		SuccessThreshold:       p.SuccessThreshold,
		HalfOpenPermittedCalls: p.HalfOpenPermittedCalls,
		Mode:                   string(mode),
		Scope:                  scope,
		MaxOpenTimeout:         breakerconfig.Duration(p.MaxOpenTimeout),
	}
	if p.SlowCallDuration > 0 {
		c.SlowCallDuration, c.SlowCallRatio = breakerconfig.Duration(p.SlowCallDuration), p.SlowCallRatio
	}
	if b := p.RetryBudget; b != nil {
		c.RetryBudget = &breakerconfig.RetryBudget{Percent: b.Percent, MinPerSecond: b.MinPerSecond}
	}
	if t := p.Throttle; t != nil {
		c.Throttle = &breakerconfig.Throttle{K: t.K}
	}
	return c
}

// fleetOf is the fleet the operator counted, as the library takes it.
func fleetOf(f breakerconfig.Fleet) breaker.Fleet {
	return breaker.Fleet{Pods: f.Pods, Requests: f.Requests, Accepts: f.Accepts}
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
