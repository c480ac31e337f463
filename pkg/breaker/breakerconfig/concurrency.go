package breakerconfig

import (
	"fmt"
	"math"
	"math/bits"
	"time"
)

// Concurrency is one bulkhead for the fleet on the wire (docs/design.md §12): the pod's
// part of the CircuitBreaker's spec.concurrency.maxInFlight, which the operator divides
// among the pods it counts, and what each pod's limiter needs beside it.
type Concurrency struct {
	// Share is the pod's limit on calls in flight: maxInFlight divided among Pods, rounded
	// down, at least 1; the whole of maxInFlight while no pod is counted.
	Share int `json:"share"`
	// Pods is how many pods Share was divided among: the running pods that report the
	// breaker, each once.
	Pods int `json:"pods"`
	// Generation moves whenever Share or Pods does, so that a pod can tell a division that
	// counted it from the one it found when it started (Limit).
	Generation int64 `json:"generation"`
	// MaxWait is how long a call over the limit waits for a slot before it is refused; 0
	// refuses it at once.
	MaxWait Duration `json:"maxWait"`
	// Adaptive, when set, lets each pod's limiter lower its limit below Share while the
	// dependency slows (never raise it above).
	Adaptive *AdaptiveConcurrency `json:"adaptive,omitempty"`
	// Baseline is the fleet's baseline latency: the median of the baselines the pods
	// report, each pod one share (docs/design.md §5.17). A pod's own may not drift above
	// it. Left out while no pod reports one.
	Baseline Duration `json:"baseline,omitempty"`
}

// AdaptiveConcurrency is spec.concurrency.adaptive on the wire: Tolerance is a JSON
// number.
type AdaptiveConcurrency struct {
	Tolerance float64 `json:"tolerance"`
	MinLimit  int     `json:"minLimit"`
}

// Bounds of the concurrency figures a pod reports, which the BreakerReport schema spells
// again (a test of api/v1alpha1 reads them from the CRD). MaxInFlight is also the bound of
// spec.concurrency.maxInFlight: no pod's share, so no honest pod's peak, passes it.
// MaxBaseline is the longest baseline latency a report may carry: longer than any call a
// limiter judges.
const (
	MaxInFlight = 1_000_000
	MaxBaseline = time.Hour
)

// Limit is the pod's limit on calls in flight: Share when the pod is among the Pods it
// was divided among (counted), else ShareBeforeTold's.
func (c Concurrency) Limit(counted bool) int {
	if counted {
		return c.Share
	}
	return ShareBeforeTold(c.Share, c.Pods)
}

// ShareBeforeTold is the limit of a pod the operator has not counted yet, after the fleet
// grew (a pod started since Share was published): the last share, times the pods it was
// divided among, over those pods plus one, the pod itself; at least 1. A pod counted by no
// one takes the whole share. It is internal/counting's ShareBeforeTold, the operator's
// statement of the rule, spelled again here because the pods' side cannot import the
// operator's internal packages; a test of internal/counting holds the two together.
func ShareBeforeTold(share, pods int) int {
	if share <= 0 {
		return 0
	}
	if pods <= 0 {
		return share
	}
	// In 128 bits: a document's share and pods are a reader's input, and their product
	// can pass an int.
	d := uint64(pods) + 1
	hi, lo := bits.Mul64(uint64(share), uint64(pods))
	if hi >= d {
		return math.MaxInt
	}
	q, _ := bits.Div64(hi, lo, d)
	return max(1, int(min(q, math.MaxInt)))
}

// validate reports the first field of c that a reader must refuse: what no
// limiter could run (a share below 1, a negative count or duration, a tolerance below 1).
// The CRD's tighter bounds (docs/design.md §3) are the operator's.
func (c *Concurrency) validate() error {
	if c.Share < 1 {
		return fmt.Errorf("concurrency.share: must be at least 1, got %d", c.Share)
	}
	if c.Pods < 0 {
		return fmt.Errorf("concurrency.pods: must not be negative, got %d", c.Pods)
	}
	if c.Generation < 0 {
		return fmt.Errorf("concurrency.generation: must not be negative, got %d", c.Generation)
	}
	if c.MaxWait < 0 {
		return fmt.Errorf("concurrency.maxWait: must not be negative, got %s", time.Duration(c.MaxWait))
	}
	if c.Baseline < 0 {
		return fmt.Errorf("concurrency.baseline: must not be negative, got %s", time.Duration(c.Baseline))
	}
	if a := c.Adaptive; a != nil {
		// Written so that NaN, which no JSON carries but a Go caller might, fails too.
		if !(a.Tolerance >= 1 && a.Tolerance <= math.MaxFloat64) {
			return fmt.Errorf("concurrency.adaptive.tolerance: must be a finite number of at least 1, got %v", a.Tolerance)
		}
		if a.MinLimit < 1 {
			return fmt.Errorf("concurrency.adaptive.minLimit: must be at least 1, got %d", a.MinLimit)
		}
	}
	return nil
}
