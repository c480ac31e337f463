package kube

import (
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// A fleet verdict hands its open period to the pod (DESIGN §5.13); one without a period
// leaves it to the pod's policy; a new period under the same since is a new verdict.
func TestFleetVerdictCarriesTheOpenPeriod(t *testing.T) {
	since := time.Date(2026, 11, 29, 10, 0, 0, 123_000_000, time.UTC)
	c := &breakerconfig.Config{Scope: breakerconfig.ScopeFleet, Verdict: &breakerconfig.Verdict{
		State: breakerconfig.StateOpen, Since: since, ConsecutiveOpens: 3, OpenTimeout: breakerconfig.Duration(4 * time.Second)}}
	v, ok := fleetVerdict(c)
	want := breaker.Verdict{State: breaker.Open, Since: since, ConsecutiveOpens: 3, OpenTimeout: 4 * time.Second}
	if !ok || !sameVerdict(v, want) {
		t.Errorf("verdict %+v, want %+v", v, want)
	}
	c.Verdict.ConsecutiveOpens, c.Verdict.OpenTimeout = 0, 0
	bare, ok := fleetVerdict(c)
	if !ok || bare.ConsecutiveOpens != 0 || bare.OpenTimeout != 0 {
		t.Errorf("verdict without a period: %+v", bare)
	}
	if sameVerdict(bare, want) {
		t.Error("a verdict whose period changed under the same since is taken for the same one, and not adopted")
	}
	c.Scope = breakerconfig.ScopePod
	if _, ok := fleetVerdict(c); ok {
		t.Error("scope Pod: a verdict to adopt")
	}
}
