package bulkhead

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/internal/counting"
	"github.com/fusebox-dev/fusebox/pkg/breaker"
)

// The incident of the adaptive runs: the dependency's capacity halves for ten minutes.
const (
	incidentStart = 30 * time.Second
	incidentEnd   = incidentStart + 10*time.Minute
	runEnd        = incidentEnd + 90*time.Second
	halved        = capacity / 2
	adaptiveBase  = 250 * time.Millisecond // a slower dependency: fewer events to simulate
)

type incident struct {
	settle  time.Duration // from the start of the incident until the fleet stays within 20 % of the new capacity; -1: never
	minutes []Second      // the fleet's calls in flight minute by minute during the incident
	// recovered is how long after the incident the fleet's calls in flight are back to
	// 90 % of the limit, for good; -1: not within the run.
	recovered time.Duration
}

// runIncident runs 200 pods with adaptive limits under their shares of 1,000 through the
// incident. With fleetBaseline the operator's part publishes, every second, the median of
// the baselines the pods report (Traffic().Baseline) as Fleet.Baseline; without it the
// pods go by their own.
func runIncident(t testing.TB, tolerance float64, fleetBaseline bool) incident {
	s := newSim()
	s.Server.Base = adaptiveBase
	share := int(counting.Share(fleetLimit, 200))
	for i := range 200 {
		// Pods started together would fold together, in step, as no fleet does: they are
		// started 5 ms apart.
		s.At(time.Duration(i)*5*time.Millisecond, func() {
			s.Start(newPod(t, s, i, share, &breaker.AdaptiveConcurrency{Tolerance: tolerance}))
		})
	}
	s.Every(time.Second, time.Second, func() {
		f := breaker.Fleet{Pods: 200}
		if fleetBaseline {
			var baselines []time.Duration
			for _, p := range s.Pods {
				if b := p.B.Traffic().Baseline; b > 0 {
					baselines = append(baselines, b)
				}
			}
			if len(baselines) > 0 {
				slices.Sort(baselines)
				f.Baseline = baselines[(len(baselines)-1)/2] // the lower median
			}
		}
		for _, p := range s.Pods {
			p.B.SetFleet(f)
		}
	})
	s.At(incidentStart, func() { s.Server.Capacity = halved })
	s.At(incidentEnd, func() { s.Server.Capacity = capacity })
	s.Run(runEnd)

	var r incident
	r.settle = -1
	within := func(x Second) bool { return x.Min >= halved*8/10 && x.Max <= halved*12/10 }
	secs := s.Seconds(incidentStart, incidentEnd)
	for i := len(secs); i > 0 && within(secs[i-1]); i-- {
		r.settle = time.Duration(i-1) * time.Second
	}
	for m := range 10 {
		lo, hi, mean := Span(secs[m*60 : (m+1)*60])
		r.minutes = append(r.minutes, Second{Min: lo, Max: hi, Mean: mean})
	}
	r.recovered = -1
	after := s.Seconds(incidentEnd, runEnd)
	for i := len(after); i > 0 && after[i-1].Min >= fleetLimit*9/10; i-- {
		r.recovered = time.Duration(i-1) * time.Second
	}
	if lo, hi, _ := Span(s.Seconds(10*time.Second, incidentStart)); lo < fleetLimit*9/10 || hi > fleetLimit {
		t.Errorf("before the incident: %d–%d in flight, want the fleet at its limit of %d", lo, hi, fleetLimit)
	}
	return r
}

// TestAdaptiveHalvedCapacity: when the dependency's capacity halves for ten minutes, the
// adaptive limits bring the fleet's calls in flight within 20 % of the new capacity within
// 30 s and hold them there for the whole ten minutes, because each pod's baseline is
// capped by the fleet's; the same limiter without the fleet's baseline drifts back toward
// the old limit.
func TestAdaptiveHalvedCapacity(t *testing.T) {
	oneGoroutine(t)
	// With this dependency a limiter settles where latency is Tolerance / (1 − 1/16)
	// times its baseline, at √ of that times the capacity: 1.08× for 1.1, 1.13× for 1.2
	// and 1.27× for the default 1.5, and the fleet's integer limits (2 or 3 calls a pod)
	// swing a few per cent about it.
	// BenchmarkFleetConcurrency runs the looser tolerances too.
	const tolerance = 1.1
	withFleet := runIncident(t, tolerance, true)
	alone := runIncident(t, tolerance, false)

	if withFleet.settle < 0 || withFleet.settle > 30*time.Second {
		t.Errorf("with the fleet's baseline: settled within 20 %% of %d after %v, want at most 30 s and to stay there", halved, withFleet.settle)
	}
	if last := alone.minutes[9]; last.Mean < halved*13/10 {
		t.Errorf("without the fleet's baseline: %.0f in flight on average in the last minute, want the drift back above %d shown", last.Mean, halved*13/10)
	}
	for _, r := range []incident{withFleet, alone} {
		if r.recovered < 0 {
			t.Errorf("the fleet was not back to 90 %% of its limit within %v of the incident's end", runEnd-incidentEnd)
		}
	}

	t.Logf("200 pods × %d callers, shares of %d each with Adaptive; dependency of capacity %d at %v, latency × (in flight / capacity)² past it; capacity %d for 10 minutes from %v", demand, fleetLimit/200, capacity, adaptiveBase, halved, incidentStart)
	t.Log("| run | settled within 20 % of 500 after | in flight by minute of the incident: mean (min–max) | back to 900 after the incident |")
	for _, r := range []struct {
		name string
		r    incident
	}{
		{fmt.Sprintf("tolerance %.1f, fleet baseline", tolerance), withFleet},
		{fmt.Sprintf("tolerance %.1f, no fleet baseline", tolerance), alone},
	} {
		t.Log(r.r.row(r.name))
	}
}

// row is the incident's line of the table docs/benchmarks.md records.
func (r incident) row(name string) string {
	var ms []string
	for _, m := range r.minutes {
		ms = append(ms, fmt.Sprintf("%.0f (%d–%d)", m.Mean, m.Min, m.Max))
	}
	settle, recovered := "never", "not within 90 s"
	if r.settle >= 0 {
		settle = r.settle.String()
	}
	if r.recovered >= 0 {
		recovered = r.recovered.String()
	}
	return fmt.Sprintf("| %s | %s | %s | %s |", name, settle, strings.Join(ms, ", "), recovered)
}
