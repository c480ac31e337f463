package breakerconfig

import (
	"math"
	"strings"
	"testing"
	"time"
)

// The fleet's limit on calls in flight (docs/design.md §4, §12), as the operator renders it.
const concurrencySample = `{
  "name": "payments-api",
  "generation": 3,
  "openTimeout": "30s",
  "window": "10s",
  "failureRatio": 0.5,
  "minimumThroughput": 20,
  "successThreshold": 2,
  "halfOpenPermittedCalls": 1,
  "mode": "Enforce",
  "scope": "Pod",
  "concurrency": {
    "share": 25,
    "pods": 4,
    "generation": 7,
    "maxWait": "250ms",
    "adaptive": {
      "tolerance": 1.5,
      "minLimit": 2
    },
    "baseline": "12.5ms"
  }
}`

func TestParseConcurrency(t *testing.T) {
	c, err := Parse([]byte(concurrencySample))
	if err != nil {
		t.Fatal(err)
	}
	want := Concurrency{Share: 25, Pods: 4, Generation: 7, MaxWait: Duration(250 * time.Millisecond),
		Adaptive: &AdaptiveConcurrency{Tolerance: 1.5, MinLimit: 2}, Baseline: Duration(12500 * time.Microsecond)}
	if k := c.Concurrency; k == nil || k.Share != want.Share || k.Pods != want.Pods || k.Generation != want.Generation ||
		k.MaxWait != want.MaxWait || k.Baseline != want.Baseline || k.Adaptive == nil || *k.Adaptive != *want.Adaptive {
		t.Fatalf("parsed %+v, want %+v", c.Concurrency, want)
	}
	// What Marshal writes, Parse reads back the same.
	doc, err := Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if string(doc) != concurrencySample {
		t.Errorf("written again:\n%s\nwant:\n%s", doc, concurrencySample)
	}
	// maxWait and baseline may be left out: refuse at once, no baseline yet.
	bare := strings.Replace(strings.Replace(concurrencySample, `"maxWait": "250ms",`, "", 1), `,
    "baseline": "12.5ms"`, "", 1)
	c, err = Parse([]byte(bare))
	if err != nil {
		t.Fatal(err)
	}
	if c.Concurrency.MaxWait != 0 || c.Concurrency.Baseline != 0 {
		t.Errorf("left out, read as %+v", c.Concurrency)
	}
	if plain, err := Parse([]byte(sample)); err != nil || plain.Concurrency != nil {
		t.Errorf("a document without a limit: %+v, %v", plain.Concurrency, err)
	}
}

// A bad value is refused whole, naming the field; the reader keeps its last good config.
func TestParseRefusesBadConcurrency(t *testing.T) {
	for _, tc := range []struct{ name, from, to, field string }{
		{"share 0", `"share": 25`, `"share": 0`, "concurrency.share"},
		{"share as string", `"share": 25`, `"share": "25"`, "concurrency.share"},
		{"negative pods", `"pods": 4`, `"pods": -1`, "concurrency.pods"},
		{"negative generation", `"generation": 7`, `"generation": -7`, "concurrency.generation"},
		{"maxWait in words", `"maxWait": "250ms"`, `"maxWait": "soon"`, "concurrency.maxWait"},
		{"negative maxWait", `"maxWait": "250ms"`, `"maxWait": "-1s"`, "concurrency.maxWait"},
		{"negative baseline", `"baseline": "12.5ms"`, `"baseline": "-1ms"`, "concurrency.baseline"},
		{"baseline as number", `"baseline": "12.5ms"`, `"baseline": 12`, "concurrency.baseline"},
		{"tolerance below 1", `"tolerance": 1.5`, `"tolerance": 0.5`, "concurrency.adaptive.tolerance"},
		{"minLimit 0", `"minLimit": 2`, `"minLimit": 0`, "concurrency.adaptive.minLimit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := strings.Replace(concurrencySample, tc.from, tc.to, 1)
			if doc == concurrencySample {
				t.Fatal("test case did not change the document")
			}
			if _, err := Parse([]byte(doc)); err == nil {
				t.Fatalf("accepted:\n%s", doc)
			} else if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("error %q does not name %s", err, tc.field)
			}
		})
	}
	c, err := Parse([]byte(concurrencySample))
	if err != nil {
		t.Fatal(err)
	}
	c.Concurrency.Adaptive.Tolerance = math.NaN()
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "concurrency.adaptive.tolerance") {
		t.Errorf("tolerance NaN: %v", err)
	}
}

// A pod counted among the pods takes its share; one that started since takes the share
// divided among those pods and itself, at least 1; one nobody counted takes the share.
func TestConcurrencyLimit(t *testing.T) {
	for _, tc := range []struct {
		share, pods     int
		counted, untold int
	}{
		{100, 0, 100, 100},
		{25, 4, 25, 20},
		{1, 50, 1, 1},
		{3, 2, 3, 2},
		{math.MaxInt, math.MaxInt - 1, math.MaxInt, math.MaxInt - 1},
	} {
		c := Concurrency{Share: tc.share, Pods: tc.pods}
		if got := c.Limit(true); got != tc.counted {
			t.Errorf("share %d of %d pods, counted: %d, want %d", tc.share, tc.pods, got, tc.counted)
		}
		if got := c.Limit(false); got != tc.untold {
			t.Errorf("share %d of %d pods, not counted: %d, want %d", tc.share, tc.pods, got, tc.untold)
		}
	}
}

// TestConcurrencyFigureBounds: the bounds the schema puts on a report's concurrency
// figures, just inside (accepted) and just outside (refused, naming the field).
func TestConcurrencyFigureBounds(t *testing.T) {
	d := func(v time.Duration) *Duration { x := Duration(v); return &x }
	for _, tc := range []struct {
		name   string
		modify func(*ReportEntry)
		field  string
	}{
		{"at the bounds", func(e *ReportEntry) {
			e.InFlightPeak, e.Limited, e.Baseline = i64(MaxInFlight), i64(MaxTrafficCount), d(MaxBaseline)
		}, ""},
		{"in-flight peak past the bound", func(e *ReportEntry) { e.InFlightPeak = i64(MaxInFlight + 1) }, "inFlightPeak"},
		{"in-flight peak below 0", func(e *ReportEntry) { e.InFlightPeak = i64(-1) }, "inFlightPeak"},
		{"limited past the bound", func(e *ReportEntry) { e.Limited = i64(MaxTrafficCount + 1) }, "limited"},
		{"baseline past the bound", func(e *ReportEntry) { e.Baseline = d(MaxBaseline + time.Millisecond) }, "baseline"},
		{"baseline below 0", func(e *ReportEntry) { e.Baseline = d(-time.Millisecond) }, "baseline"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := validEntry()
			tc.modify(&e)
			err := e.Validate()
			switch {
			case tc.field == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.field != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.field+":")):
				t.Errorf("got %v, want a refusal naming %s", err, tc.field)
			}
		})
	}
}
