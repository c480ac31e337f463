package kube

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakertest"
	"github.com/fusebox-dev/fusebox/pkg/breaker/registry"
)

// A config with a candidate sets it on the breaker; the entry carries the candidate's
// state at once and its counts when due; a config without one removes it.
func TestReporterCarriesTheCandidate(t *testing.T) {
	clock := breakertest.NewClock(time.Date(2026, 12, 2, 7, 0, 0, 0, time.UTC))
	reg, err := registry.New(breaker.DefaultPolicy(), breaker.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	r := &reporter{wake: make(chan struct{}, 1), entries: map[string]*entry{}}
	a := &applier{reg: reg, rep: r, log: slog.New(slog.DiscardHandler), created: make(chan struct{}, 1), loaded: make(chan struct{})}
	b := reg.Get("payments")
	doc := `{"name":"payments","generation":2,"openTimeout":"30s","window":"10s","failureRatio":0.5,
		"minimumThroughput":20,"successThreshold":2,"halfOpenPermittedCalls":1,"mode":"Enforce","scope":"Pod",
		"candidate":{"openTimeout":"10s","window":"10s","failureRatio":0.2,"minimumThroughput":5,"successThreshold":1,"halfOpenPermittedCalls":1}}`
	a.apply(map[string]string{breakerconfig.Key("payments"): doc})
	if _, ok := b.Candidate(); !ok {
		t.Fatal("the config's candidate was not set on the breaker")
	}
	names, ms, dirty := r.pending()
	if !dirty || len(names) != 1 {
		t.Fatalf("pending %v %v", names, dirty)
	}
	e := reportEntry(names[0], ms[0])
	if c := e.Candidate; c == nil || c.State != breakerconfig.StateClosed || c.Opens != 0 || c.WouldRefuse != 0 || !c.StartTime.Equal(clock.Now()) {
		t.Fatalf("a fresh candidate's entry: %+v", c)
	}
	r.markWritten(names, ms)

	// A blip the enforced policy rides out opens the candidate: its state goes at the
	// next sample, with the counts so far.
	for i := range 5 {
		var err error
		if i == 4 {
			err = errors.New("down")
		}
		_ = b.Execute(context.Background(), func(context.Context) error { return err })
	}
	for range 3 {
		_ = b.Execute(context.Background(), func(context.Context) error { return nil })
	}
	names, ms, dirty = r.pending()
	e = reportEntry(names[0], ms[0])
	if !dirty || e.State != breakerconfig.StateClosed || e.Candidate.State != breakerconfig.StateOpen || e.Candidate.Opens != 1 || e.Candidate.WouldRefuse != 3 {
		t.Fatalf("after a blip: dirty %v, entry %+v, candidate %+v", dirty, e, e.Candidate)
	}
	if err := e.Validate(); err != nil {
		t.Errorf("the entry is one the schema refuses: %v", err)
	}
	r.markWritten(names, ms)

	// Counts alone wait for the next window.
	_ = b.Execute(context.Background(), func(context.Context) error { return nil })
	if _, _, dirty := r.pending(); dirty {
		t.Error("a count alone was written at once")
	}
	r.nextTraffic = time.Time{} // the wait is over
	if names, ms, dirty := r.pending(); !dirty || reportEntry(names[0], ms[0]).Candidate.WouldRefuse != 4 {
		t.Errorf("a count after the wait: dirty %v", dirty)
	}

	// Without a candidate in the config, the breaker has none and the entry carries none.
	a.apply(map[string]string{breakerconfig.Key("payments"): doc[:len(doc)-len(`,
		"candidate":{"openTimeout":"10s","window":"10s","failureRatio":0.2,"minimumThroughput":5,"successThreshold":1,"halfOpenPermittedCalls":1}}`)] + "}"})
	if _, ok := b.Candidate(); ok {
		t.Error("removed from the config, the candidate stays")
	}
	if names, ms, _ := r.pending(); reportEntry(names[0], ms[0]).Candidate != nil {
		t.Error("the entry still carries a candidate")
	}

	// A breaker no longer published goes back to the default policy, which has none.
	a.apply(map[string]string{breakerconfig.Key("payments"): doc})
	if _, ok := b.Candidate(); !ok {
		t.Fatal("published again, the candidate is not set")
	}
	a.apply(nil)
	if _, ok := b.Candidate(); ok {
		t.Error("unpublished, the breaker keeps its candidate")
	}
}
