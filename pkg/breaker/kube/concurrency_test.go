package kube

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakertest"
	"github.com/fusebox-dev/fusebox/pkg/breaker/registry"
)

// limitedDoc is the operator's document of breaker payments: share divided among pods,
// under generation.
func limitedDoc(share, pods int, generation int64) string {
	return fmt.Sprintf(`{"name":"payments","generation":1,"openTimeout":"30s","window":"10s","failureRatio":0.5,
		"minimumThroughput":20,"successThreshold":2,"halfOpenPermittedCalls":1,"mode":"Enforce","scope":"Pod",
		"concurrency":{"share":%d,"pods":%d,"generation":%d,"maxWait":"250ms","adaptive":{"tolerance":2,"minLimit":3},"baseline":"12ms"}}`,
		share, pods, generation)
}

// What ConfigOf publishes of a limit reads back as the same policy; PolicyOf reads the
// share as the limit of a pod the division counted, and the zero adaptive fields as the
// library's defaults, spelled.
func TestPolicyOfAConcurrencyLimit(t *testing.T) {
	p := breaker.DefaultPolicy()
	p.MaxInFlight, p.MaxWait, p.Adaptive = 40, 250*time.Millisecond, &breaker.AdaptiveConcurrency{Tolerance: 2, MinLimit: 3}
	c := ConfigOf("payments", 3, p, breakerconfig.ScopePod)
	if k := c.Concurrency; k == nil || k.Share != 40 || k.Pods != 0 || k.Limit(false) != 40 {
		t.Fatalf("ConfigOf published %+v: every reader's limit must be MaxInFlight", k)
	}
	doc, err := breakerconfig.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := breakerconfig.Parse(doc)
	if err != nil {
		t.Fatal(err)
	}
	back, err := PolicyOf(parsed)
	if err != nil {
		t.Fatal(err)
	}
	if back.MaxInFlight != 40 || back.MaxWait != 250*time.Millisecond || back.Adaptive == nil || *back.Adaptive != *p.Adaptive {
		t.Errorf("read back %d %s %+v", back.MaxInFlight, back.MaxWait, back.Adaptive)
	}
	p.Adaptive = &breaker.AdaptiveConcurrency{}
	if a := ConfigOf("payments", 3, p, breakerconfig.ScopePod).Concurrency.Adaptive; *a != (breakerconfig.AdaptiveConcurrency{Tolerance: 1.5, MinLimit: 1}) {
		t.Errorf("zero adaptive fields published as %+v", a)
	}
	if c := ConfigOf("payments", 3, breaker.DefaultPolicy(), breakerconfig.ScopePod); c.Concurrency != nil {
		t.Errorf("no limit published as %+v", c.Concurrency)
	}
	parsed, err = breakerconfig.Parse([]byte(limitedDoc(25, 4, 7)))
	if err != nil {
		t.Fatal(err)
	}
	if p, err := PolicyOf(parsed); err != nil || p.MaxInFlight != 25 {
		t.Errorf("the share as told: %d, %v", p.MaxInFlight, err)
	}
	if f, ok := fleetOf(&parsed, false); !ok || f.Baseline != 12*time.Millisecond {
		t.Errorf("the fleet's baseline: %+v", f)
	}
}

// limiting is an applier and its reporter, its receiver holding nothing yet; toldAfter
// short, for the restarted container's case.
func limiting(t *testing.T, withReport bool) (*applier, *reporter, *breaker.Breaker) {
	t.Helper()
	reg, err := registry.New(breaker.DefaultPolicy(), breaker.WithClock(breakertest.NewClock(time.Now())))
	if err != nil {
		t.Fatal(err)
	}
	a := &applier{reg: reg, log: slog.New(slog.DiscardHandler), created: make(chan struct{}, 1), loaded: make(chan struct{}),
		toldAfter: 100 * time.Millisecond}
	var r *reporter
	if withReport {
		r = &reporter{wake: make(chan struct{}, 1), entries: map[string]*entry{}}
		r.taken = a.reportTaken
		a.rep = r
	}
	t.Cleanup(func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.recount != nil {
			a.recount.Stop()
		}
	})
	return a, r, reg.Get("payments")
}

// limitOf waits up to 10 s for b's limit to be want.
func limitOf(t *testing.T, b *breaker.Breaker, want int, why string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for b.Policy().MaxInFlight != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s: limit %d, want %d", why, b.Policy().MaxInFlight, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// written makes the receiver take the reporter's report as it stands.
func written(t *testing.T, r *reporter) {
	t.Helper()
	names, ms, _ := r.pending()
	if len(names) == 0 {
		t.Fatal("nothing to write")
	}
	r.markWritten(names, ms)
}

// A pod started after the division runs the share the counted pods leave for one more
// (docs/design.md §12); once its report is taken, a new division counts it; a division
// that stays in force toldAfter after the report was taken counts it too (a container
// restarted in a pod the operator never stopped counting); without reporting, nothing
// counts it.
func TestAPodStartedSinceTheDivision(t *testing.T) {
	t.Run("a new division counts it", func(t *testing.T) {
		a, r, b := limiting(t, true)
		a.toldAfter = time.Hour
		a.apply(map[string]string{breakerconfig.Key("payments"): limitedDoc(33, 3, 4)}) // 100 among 3
		limitOf(t, b, 24, "before its report is taken: 33 × 3 / 4")
		written(t, r)
		a.apply(map[string]string{breakerconfig.Key("payments"): limitedDoc(33, 3, 4)})
		limitOf(t, b, 24, "the same division published again")
		a.apply(map[string]string{breakerconfig.Key("payments"): limitedDoc(25, 4, 5)})
		limitOf(t, b, 25, "the division that counted it")
		a.apply(map[string]string{breakerconfig.Key("payments"): limitedDoc(50, 2, 6)})
		limitOf(t, b, 50, "a scale-down")
	})
	t.Run("a division that stays counts it", func(t *testing.T) {
		a, r, b := limiting(t, true)
		a.apply(map[string]string{breakerconfig.Key("payments"): limitedDoc(33, 3, 4)})
		limitOf(t, b, 24, "before its report is taken")
		written(t, r)
		limitOf(t, b, 33, "toldAfter after its report was taken")
	})
	t.Run("without reporting", func(t *testing.T) {
		a, _, b := limiting(t, false)
		a.apply(map[string]string{breakerconfig.Key("payments"): limitedDoc(33, 3, 4)})
		limitOf(t, b, 24, "not reporting")
		a.apply(map[string]string{breakerconfig.Key("payments"): limitedDoc(25, 4, 5)})
		limitOf(t, b, 20, "not reporting, a new division")
	})
	t.Run("the first pod of a fleet", func(t *testing.T) {
		a, _, b := limiting(t, true)
		a.apply(map[string]string{breakerconfig.Key("payments"): limitedDoc(100, 0, 1)})
		limitOf(t, b, 100, "no pod counted: the whole limit")
	})
	t.Run("the limit goes with the concurrency object", func(t *testing.T) {
		a, _, b := limiting(t, true)
		a.apply(map[string]string{breakerconfig.Key("payments"): limitedDoc(33, 3, 4)})
		limitOf(t, b, 24, "limited")
		a.apply(map[string]string{breakerconfig.Key("payments"): strings.Replace(defaultDocument, `"payments-api"`, `"payments"`, 1)})
		limitOf(t, b, 0, "no limit published")
	})
}

// The report carries a limited breaker's figures, within the schema's bounds, with its
// first write and then when they moved materially; the fleet's baseline reaches the
// breaker (SetFleet).
func TestReportCarriesTheConcurrencyFigures(t *testing.T) {
	a, r, b := limiting(t, true)
	a.toldAfter = time.Hour
	a.apply(map[string]string{breakerconfig.Key("payments"): limitedDoc(3, 0, 1)}) // the first pod: the whole 3
	if f := b.Traffic().Fleet; f.Baseline != 12*time.Millisecond {
		t.Errorf("the fleet's baseline reached the breaker as %s", f.Baseline)
	}
	var dones []func(error)
	for range 3 {
		done, err := b.Allow()
		if err != nil {
			t.Fatal(err)
		}
		dones = append(dones, done)
	}
	// The fourth waits maxWait (250ms) for a slot, and is refused.
	if _, err := b.Allow(); !errors.Is(err, breaker.ErrConcurrencyLimited) {
		t.Fatalf("a call over the limit: %v", err)
	}
	names, ms, dirty := r.pending()
	if !dirty || len(names) != 1 {
		t.Fatalf("pending %v %v", names, dirty)
	}
	e := reportEntry(names[0], ms[0])
	if e.InFlightPeak == nil || *e.InFlightPeak != 3 || e.Limited == nil || *e.Limited != 1 || e.Requests != nil {
		t.Errorf("entry %s: peak %v, limited %v, requests %v", e.Name, deref(e.InFlightPeak), deref(e.Limited), deref(e.Requests))
	}
	if err := e.Validate(); err != nil {
		t.Error(err)
	}
	for _, done := range dones {
		done(nil)
	}
	// inFlightMoved's rule: a move of a tenth, or from none to some.
	for _, tc := range []struct {
		name     string
		was, now inFlight
		moved    bool
	}{
		{"the same", inFlight{on: true, peak: 10, limited: 4, baseline: time.Millisecond}, inFlight{on: true, peak: 10, limited: 4, baseline: time.Millisecond}, false},
		{"peak by a tenth", inFlight{on: true, peak: 10}, inFlight{on: true, peak: 11}, true},
		{"peak by less", inFlight{on: true, peak: 100}, inFlight{on: true, peak: 109}, false},
		{"first refusals", inFlight{on: true, peak: 10}, inFlight{on: true, peak: 10, limited: 1}, true},
		{"baseline by a twentieth", inFlight{on: true, baseline: 20 * time.Millisecond}, inFlight{on: true, baseline: 21 * time.Millisecond}, false},
		{"baseline learnt", inFlight{on: true}, inFlight{on: true, baseline: time.Millisecond}, true},
		{"limit removed", inFlight{on: true, peak: 3}, inFlight{}, true},
	} {
		if got := inFlightMoved(tc.was, tc.now); got != tc.moved {
			t.Errorf("%s: moved %v, want %v", tc.name, got, tc.moved)
		}
	}
	// Past the schema's bounds (no pod gets there; the report must still be admitted).
	got := inFlightOf(breaker.Traffic{InFlightPeak: breakerconfig.MaxInFlight + 5, Limited: -1, Baseline: 2 * breakerconfig.MaxBaseline})
	if got != (inFlight{on: true, peak: breakerconfig.MaxInFlight, baseline: breakerconfig.MaxBaseline}) {
		t.Errorf("inFlightOf clamps to %+v", got)
	}
}
