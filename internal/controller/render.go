package controller

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// configKey is the ConfigMap data key under which a breaker is published.
func configKey(name string) string { return name + ".json" }

// render turns a CircuitBreaker into its published configuration. Fields the
// API server did not default (an object stored before a default existed) get
// the documented defaults; anything the breaker library would refuse is an
// error naming the field, so it never reaches the ConfigMap.
func render(cb *resiliencev1alpha1.CircuitBreaker) (breakerconfig.Config, error) {
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
	c := breakerconfig.Config{
		Name:                   cb.Name,
		Generation:             cb.Generation,
		OpenTimeout:            breakerconfig.Duration(openTimeout),
		Window:                 breakerconfig.Duration(window),
		FailureRatio:           float64(int32Or(s.FailureRatePercent, resiliencev1alpha1.DefaultFailureRatePercent)) / 100,
		MinimumThroughput:      int(int32Or(s.MinimumThroughput, resiliencev1alpha1.DefaultMinimumThroughput)),
		SuccessThreshold:       int(int32Or(s.SuccessThreshold, resiliencev1alpha1.DefaultSuccessThreshold)),
		HalfOpenPermittedCalls: int(int32Or(s.HalfOpenPermittedCalls, resiliencev1alpha1.DefaultHalfOpenPermittedCalls)),
		Mode:                   string(mode),
		Scope:                  string(scope),
	}
	if scope == resiliencev1alpha1.ScopeFleet {
		c.Verdict = fleetVerdict(cb.Status.Members)
	}
	if err := c.Validate(); err != nil {
		return breakerconfig.Config{}, fmt.Errorf("spec: %w", err)
	}
	return c, nil
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
