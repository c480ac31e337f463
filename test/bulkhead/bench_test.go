package bulkhead

import "testing"

// BenchmarkFleetConcurrency runs every simulation of the package once per iteration and
// reports its figures (docs/benchmarks.md, "Fleet concurrency"): for a scale-up the most
// calls the fleet had in flight and how far over its limit that is; for an incident how
// long the fleet took to settle within 20 % of the halved capacity (-1: never), its mean
// calls in flight over the last nine minutes of the incident, and how long after the
// incident it was back to 90 % of its limit. Run it with -benchtime 1x: the figures are
// the simulation's, and do not depend on the machine.
func BenchmarkFleetConcurrency(b *testing.B) {
	for _, r := range scaleUps {
		b.Run("scale-up/"+r.name, func(b *testing.B) {
			var peak, over int
			for b.Loop() {
				peak, over = scaleUp(b, r.batched, r.beforeTold, r.batches)
			}
			b.ReportMetric(float64(peak), "peak-in-flight")
			b.ReportMetric(100*float64(peak-fleetLimit)/fleetLimit, "%-over-limit")
			b.ReportMetric(float64(over), "s-over-limit")
		})
	}
	for _, r := range []struct {
		name      string
		tolerance float64
		fleet     bool
	}{
		{"tolerance-1.1/fleet-baseline", 1.1, true},
		{"tolerance-1.1/no-fleet-baseline", 1.1, false},
		{"tolerance-1.2/fleet-baseline", 1.2, true},
		{"tolerance-1.5/fleet-baseline", 0, true},
		{"tolerance-1.5/no-fleet-baseline", 0, false},
	} {
		b.Run("incident/"+r.name, func(b *testing.B) {
			var in incident
			for b.Loop() {
				in = runIncident(b, r.tolerance, r.fleet)
			}
			_, _, mean := Span(in.minutes[1:])
			settle := -1.0
			if in.settle >= 0 {
				settle = in.settle.Seconds()
			}
			b.ReportMetric(settle, "s-to-settle")
			b.ReportMetric(mean, "mean-in-flight-min2-10")
			b.ReportMetric(float64(in.minutes[9].Mean), "mean-in-flight-min10")
			b.ReportMetric(in.recovered.Seconds(), "s-to-recover")
			b.Log(in.row(r.name))
		})
	}
}
