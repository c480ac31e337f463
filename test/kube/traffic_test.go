package kube_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/kube"
)

// Issue 22: the agent hands each breaker what the operator publishes of its fleet, and
// reports its window's traffic within a bound.

// renderFleet is a published document with a fleet object, as the operator writes it
// for a breaker with a retry budget or throttling.
func renderFleet(t *testing.T, name string, gen int64, p breaker.Policy, f breakerconfig.Fleet) string {
	t.Helper()
	c := kube.ConfigOf(name, gen, p, breakerconfig.ScopePod)
	c.Fleet = &f
	doc, err := breakerconfig.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return string(doc)
}

func fleetIs(b *breaker.Breaker, want breaker.Fleet) error {
	if got := b.Traffic().Fleet; got != want {
		return fmt.Errorf("breaker %s has fleet %+v, want %+v", b.Name(), got, want)
	}
	return nil
}

// Every config applied hands its fleet to the breaker, a breaker created later included.
func TestAgentHandsTheFleetToItsBreakers(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	createBreaker(t, ns, "payments")
	p := testPolicy()
	p.RetryBudget = &breaker.RetryBudget{Percent: 20, MinPerSecond: 10}
	q := testPolicy()
	q.Throttle = &breaker.Throttle{K: 2}
	writeConfigMap(t, ns, map[string]string{
		"payments.json": renderFleet(t, "payments", 1, p, breakerconfig.Fleet{Pods: 20, Requests: 400, Accepts: 380}),
		"search.json":   renderFleet(t, "search", 1, q, breakerconfig.Fleet{Pods: 20, Requests: 90, Accepts: 30}),
	})
	in := startInstance(t, ns, "pod-a", instanceOptions{breakers: []string{"payments"}, passUID: true})
	payments := in.reg.Get("payments")
	eventually(t, propagation, func() error { return fleetIs(payments, breaker.Fleet{Pods: 20, Requests: 400, Accepts: 380}) })
	// Created after the config: the registry announces it, and the agent catches up.
	search := in.reg.Get("search")
	eventually(t, propagation, func() error { return fleetIs(search, breaker.Fleet{Pods: 20, Requests: 90, Accepts: 30}) })

	writeConfigMap(t, ns, map[string]string{
		"payments.json": renderFleet(t, "payments", 1, p, breakerconfig.Fleet{Pods: 200, Requests: 4000, Accepts: 3900}),
		"search.json":   renderFleet(t, "search", 1, q, breakerconfig.Fleet{Pods: 200, Requests: 900, Accepts: 300}),
	})
	eventually(t, propagation, func() error { return fleetIs(payments, breaker.Fleet{Pods: 200, Requests: 4000, Accepts: 3900}) })
	eventually(t, propagation, func() error { return fleetIs(search, breaker.Fleet{Pods: 200, Requests: 900, Accepts: 300}) })
}

// trafficIs checks an entry's traffic.
func trafficIs(requests, accepts int64) func(resiliencev1alpha1.BreakerReportEntry) error {
	return func(e resiliencev1alpha1.BreakerReportEntry) error {
		if e.Requests == nil || e.Accepts == nil || e.Retries == nil || e.Throttled == nil {
			return fmt.Errorf("no traffic in the entry")
		}
		if *e.Requests != requests || *e.Accepts != accepts {
			return fmt.Errorf("requests %d accepts %d, want %d %d", *e.Requests, *e.Accepts, requests, accepts)
		}
		return nil
	}
}

// A pod whose traffic moves all the time writes it at most once a window; a move below the
// material threshold is not written at all. The breakers run on a stopped clock, so their
// window keeps every call; the writer's pace is the wall clock's.
func TestAgentWritesTrafficAtMostOncePerWindow(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	createBreaker(t, ns, "payments")
	p := testPolicy()
	p.Window = time.Second
	p.Throttle = &breaker.Throttle{K: 2}
	writeConfigMap(t, ns, map[string]string{"payments.json": renderFleet(t, "payments", 1, p, breakerconfig.Fleet{Pods: 1})})
	in := startInstance(t, ns, "pod-a", instanceOptions{clock: newFakeClock(), breakers: []string{"payments"}, passUID: true})
	b := in.reg.Get("payments")
	eventually(t, propagation, func() error { return memberIs(ns, "payments", in.pod, trafficIs(0, 0)) })
	idle(t, in.agent)

	before := in.agent.Stats().Writes
	start := time.Now()
	calls := int64(0)
	for time.Since(start) < 3*time.Second {
		if err := b.Execute(context.Background(), func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
		calls++
		time.Sleep(10 * time.Millisecond)
	}
	elapsed := time.Since(start)
	writes := in.agent.Stats().Writes - before
	t.Logf("%d calls in %s: %d report writes (window 1s)", calls, elapsed.Round(time.Millisecond), writes)
	// At most one a window: 3 in 3 s, one more for the edges; and at least one, since the
	// traffic moved by far more than 10 %.
	if limit := int64(elapsed/p.Window) + 1; writes > limit || writes < 1 {
		t.Errorf("%d writes of traffic in %s, want 1 to %d", writes, elapsed, limit)
	}
	// The report settles within the threshold of the last count: a last move smaller
	// than 10 % is not worth a write of its own.
	var written int64
	eventually(t, propagation, func() error {
		return memberIs(ns, "payments", in.pod, func(e resiliencev1alpha1.BreakerReportEntry) error {
			if e.Requests == nil || *e.Requests < calls*92/100 {
				return fmt.Errorf("requests %v, want at least 92%% of %d", e.Requests, calls)
			}
			written = *e.Requests
			return nil
		})
	})
	idle(t, in.agent)

	settled := in.agent.Stats().Writes
	if err := b.Execute(context.Background(), func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * p.Window)
	if n := in.agent.Stats().Writes - settled; n != 0 {
		t.Errorf("%d calls where the report says %d (less than 10 %% apart) wrote the report %d times", calls+1, written, n)
	}
}

// A change that goes at once (a new config generation, an earned state) does not wait for
// the traffic's window, and carries the latest traffic.
func TestAgentCarriesTheLatestTrafficWithAnUrgentWrite(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	createBreaker(t, ns, "payments")
	p := testPolicy()
	p.MinimumThroughput = 1000 // the calls below never open it
	p.RetryBudget = &breaker.RetryBudget{Percent: 20}
	// A window far longer than the waits below (propagation): a write that waited for
	// the traffic's window could not arrive within them, however busy the machine.
	p.Window = 10 * time.Minute
	writeConfigMap(t, ns, map[string]string{"payments.json": renderFleet(t, "payments", 1, p, breakerconfig.Fleet{Pods: 1})})
	in := startInstance(t, ns, "pod-a", instanceOptions{clock: newFakeClock(), breakers: []string{"payments"}, passUID: true})
	b := in.reg.Get("payments")
	eventually(t, propagation, func() error { return memberIs(ns, "payments", in.pod, trafficIs(0, 0)) })
	idle(t, in.agent)

	// Traffic alone waits the window after the first report.
	for range 10 {
		_ = b.Execute(context.Background(), func(context.Context) error { return nil })
	}
	writeConfigMap(t, ns, map[string]string{"payments.json": renderFleet(t, "payments", 2, p, breakerconfig.Fleet{Pods: 1})})
	eventually(t, propagation, func() error {
		return memberIs(ns, "payments", in.pod, func(e resiliencev1alpha1.BreakerReportEntry) error {
			if e.ConfigGeneration != 2 {
				return fmt.Errorf("generation %d", e.ConfigGeneration)
			}
			return trafficIs(10, 10)(e)
		})
	})

	b.Trip()
	// Open, its window is the closed state's no more: the latest traffic is none.
	eventually(t, propagation, func() error {
		return memberIs(ns, "payments", in.pod, func(e resiliencev1alpha1.BreakerReportEntry) error {
			if err := wantReason(resiliencev1alpha1.StateOpen, breakerconfig.ReasonManual)(e); err != nil {
				return err
			}
			return trafficIs(0, 0)(e)
		})
	})
}
