package kube

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakertest"
)

// TestAdoptedOpenPeriodIsBoundedByThePolicy: a rendered Fleet verdict whose open period is
// a century leaves a pod open only as long as the policy rendered beside it allows
// (docs/semantics.md, "Backed-off open periods"): maxOpenTimeout with backoff, openTimeout
// without. Whoever wrote the verdict, one report cannot hold a pod open for longer.
func TestAdoptedOpenPeriodIsBoundedByThePolicy(t *testing.T) {
	for _, tc := range []struct {
		name  string
		max   time.Duration
		bound time.Duration
	}{
		{"maxOpenTimeout 1m", time.Minute, time.Minute},
		{"no backoff", 0, 30 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := breakertest.NewClock(time.Now())
			p := breaker.DefaultPolicy()
			p.MaxOpenTimeout = tc.max
			cfg := ConfigOf("payments", 1, p, breakerconfig.ScopeFleet)
			cfg.Verdict = &breakerconfig.Verdict{State: breakerconfig.StateOpen, Since: clock.Now(),
				ConsecutiveOpens: 1 << 30, OpenTimeout: breakerconfig.Duration(876000 * time.Hour)}
			doc, err := json.Marshal(cfg)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, breakerconfig.Key("payments")), doc, 0o644); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			a, err := Connect(ctx, Options{ConfigDir: dir, BreakerOptions: []breaker.Option{breaker.WithClock(clock)}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cancel(); <-a.Done() })
			b := a.Registry().Get("payments")
			deadline := time.Now().Add(10 * time.Second)
			for a.Stats().Adoptions == 0 {
				if time.Now().After(deadline) {
					t.Fatal("the fleet verdict was not adopted within 10s")
				}
				time.Sleep(5 * time.Millisecond)
			}
			if v := b.Verdict(); v.State != breaker.Open || v.OpenTimeout != tc.bound {
				t.Fatalf("adopted %+v, want open for %v", v, tc.bound)
			}
			clock.Advance(tc.bound - time.Millisecond)
			if s := b.State(); s != breaker.Open {
				t.Fatalf("state %v before the bound, want open", s)
			}
			clock.Advance(time.Millisecond)
			if s := b.State(); s != breaker.HalfOpen {
				t.Fatalf("state %v once the policy's bound has passed, want half-open", s)
			}
		})
	}
}
