package controller

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// render turns a CircuitBreaker into its published configuration, carrying the fleet
// verdict given (nil for none; only scope Fleet has one) and, for a breaker with a retry
// budget or adaptive throttling, the fleet's traffic. Fields the
// API server did not default (an object stored before a default existed) get
// the documented defaults; anything the breaker library would refuse is an
// error naming the field, so it never reaches the ConfigMap.
func render(cb *resiliencev1alpha1.CircuitBreaker, verdict *breakerconfig.Verdict, traffic fleetTraffic) (breakerconfig.Config, error) {
	s := cb.Spec
	openTimeout, err := durationOr(s.OpenTimeout, resiliencev1alpha1.DefaultOpenTimeout)
	if err != nil {
		return breakerconfig.Config{}, fmt.Errorf("spec.openTimeout: %w", err)
	}
	window, err := durationOr(s.Window, resiliencev1alpha1.DefaultWindow)
	if err != nil {
		return breakerconfig.Config{}, fmt.Errorf("spec.window: %w", err)
	}
	mode := s.Mode
	if mode == "" {
		mode = resiliencev1alpha1.ModeEnforce
	}
	scope := s.Scope
	if scope == "" {
		scope = resiliencev1alpha1.ScopePod
	}
	if len(cb.Name) > breakerconfig.MaxKeyNameLength {
		return breakerconfig.Config{}, fmt.Errorf("metadata.name: %d characters, more than the %d a ConfigMap key leaves for it", len(cb.Name), breakerconfig.MaxKeyNameLength)
	}
	c := breakerconfig.Config{
		Name:                   cb.Name,
		Generation:             cb.Generation,
		UID:                    string(cb.UID),
		OpenTimeout:            breakerconfig.Duration(openTimeout),
		Window:                 breakerconfig.Duration(window),
		FailureRatio:           float64(int32Or(s.FailureRatePercent, resiliencev1alpha1.DefaultFailureRatePercent)) / 100,
		MinimumThroughput:      int(int32Or(s.MinimumThroughput, resiliencev1alpha1.DefaultMinimumThroughput)),
		SuccessThreshold:       int(int32Or(s.SuccessThreshold, resiliencev1alpha1.DefaultSuccessThreshold)),
		HalfOpenPermittedCalls: int(int32Or(s.HalfOpenPermittedCalls, resiliencev1alpha1.DefaultHalfOpenPermittedCalls)),
		Mode:                   string(mode),
		Scope:                  string(scope),
	}
	renderSlowCallsAndBackoff(&c, s)
	renderFleetPolicies(&c, s, traffic)
	if scope == resiliencev1alpha1.ScopeFleet {
		c.Verdict = verdict
	}
	if err := c.Validate(); err != nil {
		return breakerconfig.Config{}, fmt.Errorf("spec: %w", err)
	}
	return c, nil
}

// renderSlowCallsAndBackoff adds the optional judgements of docs/design.md §5.13: slowCallRatio
// only with slowCallDuration, since a ratio alone judges nothing and a reader would take
// it for a setting in force; maxOpenTimeout whenever it is set. Left out, the pods judge
// no call slow and keep every open period at openTimeout.
func renderSlowCallsAndBackoff(c *breakerconfig.Config, s resiliencev1alpha1.CircuitBreakerSpec) {
	if s.SlowCallDuration != nil {
		c.SlowCallDuration = breakerconfig.Duration(s.SlowCallDuration.Duration)
		c.SlowCallRatio = float64(int32Or(s.SlowCallRatePercent, resiliencev1alpha1.DefaultSlowCallRatePercent)) / 100
	}
	if s.MaxOpenTimeout != nil {
		c.MaxOpenTimeout = breakerconfig.Duration(s.MaxOpenTimeout.Duration)
	}
}

func durationOr(d *metav1.Duration, def string) (time.Duration, error) {
	if d == nil {
		return time.ParseDuration(def)
	}
	return d.Duration, nil
}

func int32Or(p *int32, def int32) int32 {
	if p == nil {
		return def
	}
	return *p
}
