package kube_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// TestGroupReport: an application with a breaker Group of many keys, some failing, writes
// one report entry for the Group, not one per key, with the Group's key summary; keys
// evicted and keys recovered update it, and uses that change no summary write nothing.
func TestGroupReport(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	p := testPolicy() // opens at half of two calls; 30s open; two probes close
	p.OpenTimeout = 30 * time.Second
	writeConfigMap(t, ns, map[string]string{
		breakerconfig.Key("tenants"): render(t, "tenants", 3, p, "Pod", nil),
	})
	clock := newFakeClock()
	in := startInstance(t, ns, "app", instanceOptions{clock: clock})
	g := in.reg.Group("tenants")
	g.SetMaxKeys(20)
	eventually(t, propagation, func() error {
		if got := g.Get("tenant-0").Policy(); got.MinimumThroughput != p.MinimumThroughput {
			return fmt.Errorf("the Group runs %+v, want the published policy", got)
		}
		return nil
	})

	ctx := context.Background()
	key := func(i int) string { return "tenant-" + strconv.Itoa(i) }
	for i := range 12 {
		_ = g.Get(key(i)).Execute(ctx, ok)
	}
	var openedAt time.Time
	for i := range 3 { // three tenants are down, opened one second apart
		clock.Advance(time.Second)
		if i == 0 {
			openedAt = clock.Now()
		}
		_ = g.Get(key(i)).Execute(ctx, fail)
		_ = g.Get(key(i)).Execute(ctx, fail)
	}
	groupIs := func(state resiliencev1alpha1.State, reason string, keys resiliencev1alpha1.KeySummary) func() error {
		return func() error {
			_, es, err := reportOf(ns, "app")
			if err != nil {
				return err
			}
			if len(es) != 1 {
				return fmt.Errorf("%d report entries, want the Group's alone", len(es))
			}
			return memberIs(ns, "tenants", "app", func(e resiliencev1alpha1.BreakerReportEntry) error {
				switch {
				case e.State != state || e.Reason != reason || e.ConfigGeneration != 3:
					return fmt.Errorf("%s (%s) generation %d, want %s (%s) generation 3", e.State, e.Reason, e.ConfigGeneration, state, reason)
				case e.Keys == nil:
					return fmt.Errorf("no keys")
				case e.Keys.Keys != keys.Keys || e.Keys.Open != keys.Open || e.Keys.HalfOpen != keys.HalfOpen || !slices.Equal(e.Keys.Worst, keys.Worst):
					return fmt.Errorf("keys %+v, want %+v", *e.Keys, keys)
				}
				return nil
			})
		}
	}
	eventually(t, propagation, groupIs(resiliencev1alpha1.StateOpen, breakerconfig.ReasonTripped,
		resiliencev1alpha1.KeySummary{Keys: 12, Open: 3, Worst: []string{key(2), key(1), key(0)}}))
	if err := memberIs(ns, "tenants", "app", func(e resiliencev1alpha1.BreakerReportEntry) error {
		if !e.Since.Time.Equal(openedAt) || e.Calls == nil || *e.Calls != 2 || *e.FailureRatePercent != 50 {
			return fmt.Errorf("since %v calls %v rate %v, want the first key's opening at %v on one call failed of 2", e.Since.Time, deref(e.Calls), deref(e.FailureRatePercent), openedAt)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}

	// Calls on keys that exist change no summary, and write nothing.
	idle(t, in.agent)
	writes := in.agent.Stats().Writes
	for range 100 {
		for i := 3; i < 12; i++ {
			_ = g.Get(key(i)).Execute(ctx, ok)
		}
	}
	time.Sleep(2500 * time.Millisecond) // two of the writer's re-reads of Group summaries
	idle(t, in.agent)
	if got := in.agent.Stats().Writes; got != writes {
		t.Errorf("%d report writes for calls that changed no summary", got-writes)
	}

	// A tighter bound evicts idle closed keys, never the open ones.
	g.SetMaxKeys(5)
	eventually(t, propagation, groupIs(resiliencev1alpha1.StateOpen, breakerconfig.ReasonTripped,
		resiliencev1alpha1.KeySummary{Keys: 5, Open: 3, Worst: []string{key(2), key(1), key(0)}}))

	// Their open period ends: the Group probes, then recovers. Each key went half-open
	// when its own open period ended, in the order they opened: the most recent first.
	clock.Advance(p.OpenTimeout)
	eventually(t, propagation, groupIs(resiliencev1alpha1.StateHalfOpen, breakerconfig.ReasonTimedOut,
		resiliencev1alpha1.KeySummary{Keys: 5, HalfOpen: 3, Worst: []string{key(2), key(1), key(0)}}))
	for i := range 3 {
		for range p.SuccessThreshold {
			if err := g.Get(key(i)).Execute(ctx, ok); err != nil {
				t.Fatalf("probe of %s: %v", key(i), err)
			}
		}
	}
	eventually(t, propagation, groupIs(resiliencev1alpha1.StateClosed, breakerconfig.ReasonProbesSucceeded,
		resiliencev1alpha1.KeySummary{Keys: 5}))
	if g.Get(key(0)).State() != breaker.Closed {
		t.Error("a recovered key is not closed")
	}
	if s := in.agent.Stats(); s.WriteFailures != 0 {
		t.Errorf("stats %+v: some writes failed", s)
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}
