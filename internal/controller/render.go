package controller

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/counting"
	"github.com/fusebox-dev/fusebox/internal/policy"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// render turns a CircuitBreaker into its published configuration, carrying the fleet
// verdict given (nil for none; only scope Fleet has one), what the operator counted of its
// pods (for a breaker with a retry budget or adaptive throttling the fleet's traffic, with
// a concurrency limit each pod's share), and its candidate policy. Its
// policy and the candidate's are rendered alike (internal/policy). Fields the API server
// did not default (an object stored before a default existed) get the documented
// defaults; anything the breaker library would refuse is an error naming the field, so
// it never reaches the ConfigMap.
func render(cb *resiliencev1alpha1.CircuitBreaker, verdict *breakerconfig.Verdict, counted fleetCounts) (breakerconfig.Config, error) {
	s := cb.Spec
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
		Name:       cb.Name,
		Generation: cb.Generation,
		UID:        string(cb.UID),
		Policy:     policy.Render(s),
		Mode:       string(mode),
		Scope:      string(scope),
		Candidate:  policy.Candidate(s),
	}
	renderFleetPolicies(&c, s, counted.traffic)
	c.Concurrency = renderConcurrency(s.Concurrency, counted.concurrency, counted.shareGeneration)
	if scope == resiliencev1alpha1.ScopeFleet {
		c.Verdict = verdict
	}
	if err := c.Validate(); err != nil {
		return breakerconfig.Config{}, fmt.Errorf("spec: %w", err)
	}
	return c, nil
}

// fleetCounts is what the operator counted of a breaker's pods for its rendered config.
type fleetCounts struct {
	traffic     counting.FleetTraffic
	concurrency counting.FleetConcurrency
	// shareGeneration is the generation the share is published under (shareGeneration).
	shareGeneration int64
}

func durationOr(d *metav1.Duration, def time.Duration) time.Duration {
	if d == nil {
		return def
	}
	return d.Duration
}

func int32Or(p *int32, def int32) int32 {
	if p == nil {
		return def
	}
	return *p
}
