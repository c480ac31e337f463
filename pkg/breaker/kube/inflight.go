package kube

import (
	"math"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// A concurrency limit's figures (docs/design.md §7, §12): for a breaker with one, the
// report also carries the most calls it had in flight at once over its window, the calls
// the limit refused, and its adaptive limiter's baseline latency, which the operator adds
// up into status.concurrency and takes the fleet's median baseline of. They are sampled
// and written as traffic is (traffic.go): with any write, and on their own at most once a
// window, when they moved materially.

// inFlight is what the report says of a breaker's concurrency; on: the breaker has a
// limit.
type inFlight struct {
	on            bool
	peak, limited int64
	baseline      time.Duration // to the microsecond: a baseline's noise, not its figure
}

// inFlightOf is what the report says of t: each figure inside the schema's bound.
func inFlightOf(t breaker.Traffic) inFlight {
	return inFlight{
		on:       true,
		peak:     min(max(t.InFlightPeak, 0), breakerconfig.MaxInFlight),
		limited:  min(max(t.Limited, 0), breakerconfig.MaxTrafficCount),
		baseline: min(max(t.Baseline, 0), breakerconfig.MaxBaseline).Truncate(time.Microsecond),
	}
}

// inFlightMoved reports whether now differs materially from was: the peak, the refusals or
// the baseline by at least trafficVolumeMove of what was written, or from none to some or
// back.
func inFlightMoved(was, now inFlight) bool {
	if was.on != now.on {
		return true
	}
	moved := func(a, b int64) bool {
		if a == 0 || b == 0 {
			return a != b
		}
		// In float64, whose rounding must not decide a move of exactly the threshold.
		const slack = 1e-9
		return math.Abs(float64(b-a)) >= trafficVolumeMove*float64(a)-slack
	}
	return moved(was.peak, now.peak) || moved(was.limited, now.limited) || moved(int64(was.baseline), int64(now.baseline))
}
