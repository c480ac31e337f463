package breakerconfig

import (
	"encoding/json"
	"fmt"
	"time"
)

// The BreakerReport resource: one per pod, named after the pod and owned by it,
// listing every breaker the pod runs (docs/design.md §7).
const (
	ReportKind     = "BreakerReport"
	ReportResource = "breakerreports"
)

// Bounds of a report entry, the same the BreakerReport schema enforces.
const (
	MaxReportEntries   = 1000
	MaxConfigErrorSize = 1024
)

// ReportEntry is one breaker's line in a pod's BreakerReport. Field order is the
// order on the wire. The API type (api/v1alpha1.BreakerReportEntry) spells the
// same fields for the operator; a test holds the two together.
type ReportEntry struct {
	// Name is the breaker's (and its CircuitBreaker's) name.
	Name string `json:"name"`
	// State is StateClosed, StateOpen or StateHalfOpen.
	State string `json:"state"`
	// Since is when the breaker reached State, written to the millisecond.
	Since Time `json:"since"`
	// Reason is how it got there: one of the Reason constants.
	Reason string `json:"reason"`
	// Calls and FailureRatePercent describe the window at the transition into
	// State; both are left out when the transition carried no calls.
	Calls              *int64 `json:"calls,omitempty"`
	FailureRatePercent *int32 `json:"failureRatePercent,omitempty"`
	// SlowCallRatePercent is the slow-call rate of the window at the transition,
	// written when the breaker judges slow calls and the transition carried calls.
	SlowCallRatePercent *int32 `json:"slowCallRatePercent,omitempty"`
	// Trigger says which judgement of calls opened the circuit, for reasons
	// Tripped and ProbeFailed: one of the Trigger constants.
	Trigger string `json:"trigger,omitempty"`
	// ConsecutiveOpens is how many open periods in a row the circuit has had,
	// counting the current one; 0 or left out when closed.
	ConsecutiveOpens int32 `json:"consecutiveOpens,omitempty"`
	// OpenTimeout is the length of the current (or, half-open, the last) open
	// period, written with ConsecutiveOpens.
	OpenTimeout *Duration `json:"openTimeout,omitempty"`
	// Keys summarises a breaker Group's per-key breakers, for a Group only.
	Keys *KeySummary `json:"keys,omitempty"`
	// Requests, Accepts, Retries and Throttled are the window's traffic
	// (docs/design.md §7), written only for a breaker with a retry budget or
	// adaptive throttling; each at most MaxTrafficCount.
	Requests  *int64 `json:"requests,omitempty"`
	Accepts   *int64 `json:"accepts,omitempty"`
	Retries   *int64 `json:"retries,omitempty"`
	Throttled *int64 `json:"throttled,omitempty"`
	// InFlightPeak, Limited and Baseline are the window's concurrency figures
	// (docs/design.md §12), written only for a breaker with a concurrency limit: the most
	// calls in flight at once (at most MaxInFlight), the calls refused over the pod's limit
	// (at most MaxTrafficCount), and the pod's baseline latency (at most MaxBaseline; left
	// out until its limiter has one).
	InFlightPeak *int64    `json:"inFlightPeak,omitempty"`
	Limited      *int64    `json:"limited,omitempty"`
	Baseline     *Duration `json:"baseline,omitempty"`
	// Candidate is the pod's shadow judgement of the breaker's candidate policy,
	// written while the config it runs has one.
	Candidate *CandidateEntry `json:"candidate,omitempty"`
	// ConfigGeneration is the generation of the config the pod runs for it.
	ConfigGeneration int64 `json:"configGeneration,omitempty"`
	// ConfigError says why the pod refused the latest published config.
	ConfigError string `json:"configError,omitempty"`
}

// KeySummary is a breaker Group's line in a report: one entry for the whole
// Group, not one per key.
type KeySummary struct {
	// Keys is how many per-key breakers the Group holds.
	Keys int32 `json:"keys"`
	// Open and HalfOpen count the keys in each state.
	Open     int32 `json:"open"`
	HalfOpen int32 `json:"halfOpen"`
	// Worst names at most MaxWorstKeys keys that are not closed: open first,
	// most recently opened first.
	Worst []string `json:"worst,omitempty"`
}

// MaxWorstKeys bounds KeySummary.Worst. A Group's summary (package registry) names at
// most this many keys, and the BreakerReport schema's maxItems spells it again, which a
// test of api/v1alpha1 holds to it.
const MaxWorstKeys = 5

// MaxKeyCount bounds each count of a KeySummary: the BreakerReport schema refuses a
// higher one. No real Group holds that many keys, and the operator's sums over the pods
// of a fleet stay inside int32 up to 5,000 pods at this bound; a reporter saturates its
// counts here.
const MaxKeyCount = 400_000

// MaxTrafficCount bounds each traffic count of a report entry: the BreakerReport schema
// refuses a higher one, and a reporter saturates its counts here. The operator's sums over
// 5,000 pods stay below 2^53 (5·10^15): exact as JSON numbers, far from overflowing int64.
const MaxTrafficCount = 1_000_000_000_000

// Time is a timestamp written in RFC 3339 with exactly three fractional digits,
// so that equal times are equal strings and a fleet's shared open period does
// not move by up to a second on every pod that adopts it (whole seconds, as
// Kubernetes writes its own times, would).
type Time struct{ time.Time }

// TimeFormat is how Time is written.
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"

// NewTime returns t cut to what the wire keeps: UTC milliseconds.
func NewTime(t time.Time) Time { return Time{t.UTC().Truncate(time.Millisecond)} }

// MarshalJSON writes t in TimeFormat.
func (t Time) MarshalJSON() ([]byte, error) {
	return json.Marshal(t.UTC().Format(TimeFormat))
}

// UnmarshalJSON reads any RFC 3339 time.
func (t *Time) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want an RFC 3339 time string, got %s", b)
	}
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return err
	}
	t.Time = v
	return nil
}
