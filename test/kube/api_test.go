package kube_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/kube"
)

// propagation bounds how long the API server and the informers may take to carry a change.
const propagation = 15 * time.Second

var errFailed = errors.New("dependency failed")

func fail(context.Context) error { return errFailed }
func ok(context.Context) error   { return nil }

func TestConfigUpdateKeepsState(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	createBreaker(t, ns, "payments")
	p1 := testPolicy()
	writeConfigMap(t, ns, map[string]string{"payments.json": render(t, "payments", 1, p1, "Pod", nil)})

	clock := newFakeClock()
	var ins []*instance
	for _, pod := range []string{"a", "b", "c"} {
		ins = append(ins, startInstance(t, ns, pod, instanceOptions{clock: clock, breakers: []string{"payments"}}))
	}
	eventually(t, propagation, func() error { return policyIs(ins, "payments", p1) })

	// a opens on its own evidence.
	a := ins[0].reg.Get("payments")
	_ = a.Execute(context.Background(), fail)
	_ = a.Execute(context.Background(), fail)
	if a.State() != breaker.Open {
		t.Fatalf("a: %v after two failures, want open", a.State())
	}
	openedAt := a.Verdict().Since

	p2 := p1
	p2.OpenTimeout = time.Minute
	p2.MinimumThroughput = 5
	writeConfigMap(t, ns, map[string]string{"payments.json": render(t, "payments", 2, p2, "Pod", nil)})
	eventually(t, propagation, func() error { return policyIs(ins, "payments", p2) })

	if v := a.Verdict(); v.State != breaker.Open || !v.Since.Equal(openedAt) {
		t.Fatalf("a after the update: %v since %v, want still open since %v", v.State, v.Since, openedAt)
	}
	for _, in := range ins[1:] {
		if s := in.reg.Get("payments").State(); s != breaker.Closed {
			t.Errorf("%s: %v, want closed", in.pod, s)
		}
	}
	// The open period is timed from when it opened, under the new timeout.
	clock.Advance(40 * time.Second)
	if s := a.State(); s != breaker.Open {
		t.Fatalf("a 40s after opening under a 1m timeout: %v, want open", s)
	}
	clock.Advance(20 * time.Second)
	if s := a.State(); s != breaker.HalfOpen {
		t.Fatalf("a 60s after opening under a 1m timeout: %v, want half-open", s)
	}
	eventually(t, propagation, func() error {
		for _, in := range ins {
			want := resiliencev1alpha1.StateClosed
			if in.pod == "a" {
				want = resiliencev1alpha1.StateHalfOpen
			}
			if err := memberIs(ns, "payments", in.pod, wantEntry(want, 2)); err != nil {
				return err
			}
		}
		return nil
	})
}

func TestBadEntryIsRefusedForThatBreakerOnly(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	createBreaker(t, ns, "good")
	createBreaker(t, ns, "bad")
	p1 := testPolicy()
	writeConfigMap(t, ns, map[string]string{
		"good.json": render(t, "good", 1, p1, "Pod", nil),
		"bad.json":  render(t, "bad", 1, p1, "Pod", nil),
	})
	var ins []*instance
	for _, pod := range []string{"a", "b"} {
		ins = append(ins, startInstance(t, ns, pod, instanceOptions{breakers: []string{"good", "bad"}}))
	}
	eventually(t, propagation, func() error {
		for _, in := range ins {
			for _, name := range []string{"good", "bad"} {
				if err := memberIs(ns, name, in.pod, wantEntry(resiliencev1alpha1.StateClosed, 1)); err != nil {
					return err
				}
			}
		}
		return nil
	})

	p2 := p1
	p2.SuccessThreshold = 5
	badDoc := strings.Replace(render(t, "bad", 2, p2, "Pod", nil), `"openTimeout": "30s"`, `"openTimeout": "soon"`, 1)
	// Several updates with the same bad entry: each pod logs the refusal once.
	for gen := int64(2); gen <= 4; gen++ {
		writeConfigMap(t, ns, map[string]string{
			"good.json": render(t, "good", gen, p2, "Pod", nil),
			"bad.json":  badDoc,
		})
	}
	eventually(t, propagation, func() error {
		if err := policyIs(ins, "good", p2); err != nil {
			return err
		}
		if err := policyIs(ins, "bad", p1); err != nil {
			return err
		}
		for _, in := range ins {
			if err := memberIs(ns, "good", in.pod, wantEntry(resiliencev1alpha1.StateClosed, 4)); err != nil {
				return err
			}
			err := memberIs(ns, "bad", in.pod, func(m resiliencev1alpha1.BreakerReportEntry) error {
				if m.ConfigGeneration != 1 || !strings.Contains(m.ConfigError, "openTimeout") {
					return fmt.Errorf("want generation 1 kept and a configError naming openTimeout")
				}
				if m.State != resiliencev1alpha1.StateClosed {
					return fmt.Errorf("state %s, want Closed", m.State)
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	for _, in := range ins {
		if n := strings.Count(in.logs.String(), "Refused published breaker config"); n != 1 {
			t.Errorf("pod %s logged the refusal %d times, want once:\n%s", in.pod, n, in.logs)
		}
	}

	// Fixed: the refusal is cleared from the entry (server-side apply drops the field the
	// pod no longer sets) and the new policy runs.
	writeConfigMap(t, ns, map[string]string{
		"good.json": render(t, "good", 4, p2, "Pod", nil),
		"bad.json":  render(t, "bad", 5, p2, "Pod", nil),
	})
	eventually(t, propagation, func() error {
		if err := policyIs(ins, "bad", p2); err != nil {
			return err
		}
		for _, in := range ins {
			err := memberIs(ns, "bad", in.pod, func(m resiliencev1alpha1.BreakerReportEntry) error {
				if m.ConfigGeneration != 5 || m.ConfigError != "" {
					return fmt.Errorf("want generation 5 and no configError")
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})

	// The key deleted (its CircuitBreaker is gone): back to the default policy, and out of
	// the report, which keeps the others.
	writes := make([]int64, len(ins))
	for i, in := range ins {
		idle(t, in.agent)
		writes[i] = in.agent.Stats().Writes
	}
	writeConfigMap(t, ns, map[string]string{"good.json": render(t, "good", 4, p2, "Pod", nil)})
	eventually(t, propagation, func() error { return policyIs(ins, "bad", breaker.DefaultPolicy()) })
	eventually(t, propagation, func() error {
		for _, in := range ins {
			_, es, err := reportOf(ns, in.pod)
			if err != nil {
				return err
			}
			if _, ok := es["bad"]; ok || len(es) != 1 {
				return fmt.Errorf("pod %s reports %v, want only good", in.pod, es)
			}
		}
		return nil
	})
	for i, in := range ins {
		idle(t, in.agent)
		if n := in.agent.Stats().Writes - writes[i]; n != 1 {
			t.Errorf("pod %s wrote %d times when a breaker was unpublished, want once", in.pod, n)
		}
	}
}

func TestFleetVerdictIsAdoptedOnce(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	createBreaker(t, ns, "shared")
	createBreaker(t, ns, "other")
	p := testPolicy()
	cm := func(gen int64, v *breakerconfig.Verdict, otherGen int64) map[string]string {
		po := p
		po.SuccessThreshold = int(otherGen)
		return map[string]string{
			"shared.json": render(t, "shared", gen, p, "Fleet", v),
			"other.json":  render(t, "other", otherGen, po, "Pod", nil),
		}
	}
	writeConfigMap(t, ns, cm(1, nil, 1))
	clock := newFakeClock()
	var ins []*instance
	for _, pod := range []string{"a", "b"} {
		ins = append(ins, startInstance(t, ns, pod, instanceOptions{clock: clock, breakers: []string{"shared", "other"}}))
	}
	eventually(t, propagation, func() error {
		for _, in := range ins {
			if err := memberIs(ns, "shared", in.pod, wantEntry(resiliencev1alpha1.StateClosed, 1)); err != nil {
				return err
			}
		}
		return nil
	})

	// Another pod opened the fleet 5s ago.
	opened := clock.Now().Add(-5 * time.Second)
	writeConfigMap(t, ns, cm(1, &breakerconfig.Verdict{State: "Open", Since: opened}, 1))
	eventually(t, propagation, func() error {
		for _, in := range ins {
			if v := in.reg.Get("shared").Verdict(); v.State != breaker.Open || !v.Since.Equal(opened) {
				return fmt.Errorf("pod %s: %v since %v, want open since %v", in.pod, v.State, v.Since, opened)
			}
			if err := memberIs(ns, "shared", in.pod, func(m resiliencev1alpha1.BreakerReportEntry) error {
				if m.State != resiliencev1alpha1.StateOpen || !m.Since.Time.Equal(opened) || m.Reason != breakerconfig.ReasonAdopted {
					return fmt.Errorf("want Open (Adopted) since %v", opened)
				}
				if m.Calls != nil || m.FailureRatePercent != nil {
					return fmt.Errorf("an adopted verdict carries no local failure rate")
				}
				return nil
			}); err != nil {
				return err
			}
		}
		return nil
	})

	// A pod that starts while the fleet is open, and creates the breaker only after its
	// config arrived, is open from its first report on.
	late := startInstance(t, ns, "late", instanceOptions{clock: clock})
	eventually(t, propagation, func() error {
		if late.agent.Stats().ConfigApplies == 0 {
			return errors.New("late has no config yet")
		}
		return nil
	})
	late.reg.Get("shared")
	eventually(t, propagation, func() error {
		return memberIs(ns, "shared", "late", func(m resiliencev1alpha1.BreakerReportEntry) error {
			if m.State != resiliencev1alpha1.StateOpen || !m.Since.Time.Equal(opened) || m.Reason != breakerconfig.ReasonAdopted {
				return fmt.Errorf("want Open (Adopted) since %v", opened)
			}
			return nil
		})
	})
	idle(t, late.agent)
	if n := late.agent.Stats().Writes; n != 1 {
		t.Errorf("late wrote %d times, want once (Open, never a fresh Closed)", n)
	}
	ins = append(ins, late)

	// a restarts its open period by hand; then the ConfigMap changes for another reason,
	// with the fleet verdict unchanged: a must not be sent back to the older start.
	clock.Advance(2 * time.Second)
	a := ins[0].reg.Get("shared")
	a.Trip()
	tripped := a.Verdict().Since
	writeConfigMap(t, ns, cm(1, &breakerconfig.Verdict{State: "Open", Since: opened}, 2))
	po := p
	po.SuccessThreshold = 2
	eventually(t, propagation, func() error { return policyIs(ins, "other", po) })
	if v := a.Verdict(); !v.Since.Equal(tripped) {
		t.Errorf("a: open since %v after an unrelated ConfigMap change, want %v (its own Trip)", v.Since, tripped)
	}
	for _, in := range ins {
		if n := in.agent.Stats().Adoptions; n != 1 {
			t.Errorf("pod %s adopted %d verdicts, want 1", in.pod, n)
		}
	}

	// A member closed after its probes succeeded: the fleet closes.
	clock.Advance(time.Second)
	closed := clock.Now()
	writeConfigMap(t, ns, cm(1, &breakerconfig.Verdict{State: "Closed", Since: closed}, 2))
	eventually(t, propagation, func() error {
		for _, in := range ins {
			if v := in.reg.Get("shared").Verdict(); v.State != breaker.Closed || !v.Since.Equal(closed) {
				return fmt.Errorf("pod %s: %v since %v, want closed since %v", in.pod, v.State, v.Since, closed)
			}
			if err := memberIs(ns, "shared", in.pod, wantReason(resiliencev1alpha1.StateClosed, breakerconfig.ReasonAdopted)); err != nil {
				return err
			}
		}
		return nil
	})
}

// TestEachPodWritesItsOwnReport: one BreakerReport per pod, named after it, owned by its
// Pod, applied by one field manager; a change on one pod is one write of its report and
// none of any other.
func TestEachPodWritesItsOwnReport(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	createBreaker(t, ns, "orders")
	createBreaker(t, ns, "catalog")
	p := testPolicy()
	p.FailureRatio = 0.6
	writeConfigMap(t, ns, map[string]string{
		"orders.json":  render(t, "orders", 3, p, "Pod", nil),
		"catalog.json": render(t, "catalog", 1, p, "Pod", nil),
	})
	clock := newFakeClock()
	a := startInstance(t, ns, "a", instanceOptions{clock: clock, breakers: []string{"orders", "catalog"}})
	// b is given its UID (POD_UID), a reads it from its Pod.
	b := startInstance(t, ns, "b", instanceOptions{clock: clock, breakers: []string{"orders", "catalog"}, passUID: true})
	eventually(t, propagation, func() error {
		for _, pod := range []string{"a", "b"} {
			if err := memberIs(ns, "orders", pod, wantEntry(resiliencev1alpha1.StateClosed, 3)); err != nil {
				return err
			}
			if err := memberIs(ns, "catalog", pod, wantReason(resiliencev1alpha1.StateClosed, breakerconfig.ReasonStarted)); err != nil {
				return err
			}
		}
		return nil
	})
	for _, in := range []*instance{a, b} {
		rep, _, err := reportOf(ns, in.pod)
		if err != nil {
			t.Fatal(err)
		}
		want := []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: in.pod, UID: in.uid}}
		if !reflect.DeepEqual(rep.OwnerReferences, want) {
			t.Errorf("report of %s owned by %+v, want %+v", in.pod, rep.OwnerReferences, want)
		}
		var managers []string
		for _, mf := range rep.ManagedFields {
			managers = append(managers, fmt.Sprintf("%s/%s", mf.Manager, mf.Operation))
		}
		if !reflect.DeepEqual(managers, []string{kube.FieldManager + "/Apply"}) {
			t.Errorf("report of %s managed by %v, want only %s by Apply", in.pod, managers, kube.FieldManager)
		}
		// Both breakers went into the report in one write: they were configured by one
		// ConfigMap.
		idle(t, in.agent)
		if s := in.agent.Stats(); s.Writes != 1 || s.WriteFailures != 0 || s.LastWriteError != "" {
			t.Errorf("pod %s: stats %+v, want one write for the first report", in.pod, s)
		}
	}

	bReport, _, _ := reportOf(ns, "b")
	aWrites, bWrites := a.agent.Stats().Writes, b.agent.Stats().Writes
	clock.Advance(time.Second)
	ab := a.reg.Get("orders")
	_ = ab.Execute(context.Background(), ok)
	_ = ab.Execute(context.Background(), fail)
	_ = ab.Execute(context.Background(), fail) // 2 of 3 failed: opens
	if ab.State() != breaker.Open {
		t.Fatalf("a: %v, want open", ab.State())
	}
	eventually(t, propagation, func() error {
		return memberIs(ns, "orders", "a", func(m resiliencev1alpha1.BreakerReportEntry) error {
			if m.State != resiliencev1alpha1.StateOpen || m.Reason != breakerconfig.ReasonTripped || !m.Since.Time.Equal(clock.Now()) ||
				m.Calls == nil || *m.Calls != 3 || m.FailureRatePercent == nil || *m.FailureRatePercent != 67 {
				return fmt.Errorf("want Open (Tripped) since %v with 67%% of 3 calls failed", clock.Now())
			}
			return nil
		})
	})
	idle(t, a.agent)
	if n := a.agent.Stats().Writes - aWrites; n != 1 {
		t.Errorf("a wrote its report %d times for one transition, want once", n)
	}
	after, _, _ := reportOf(ns, "b")
	if after.ResourceVersion != bReport.ResourceVersion {
		t.Errorf("b's report changed when a opened: %+v → %+v", bReport.Breakers, after.Breakers)
	}
	if n := b.agent.Stats().Writes; n != bWrites {
		t.Errorf("b wrote %d times when a opened", n-bWrites)
	}
}
