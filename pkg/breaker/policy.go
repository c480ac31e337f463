package breaker

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// State is the state of a circuit.
type State int32

// The three states of a circuit. The zero value is Closed.
const (
	Closed State = iota
	Open
	HalfOpen
)

// String returns "closed", "open" or "half_open", the spelling used in telemetry.
func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case HalfOpen:
		return "half_open"
	}
	return fmt.Sprintf("State(%d)", int32(s))
}

// ParseState reads a state in either of the spellings Fusebox uses: the telemetry one of
// [State.String] ("closed", "open", "half_open") or the CamelCase one of the rendered config
// and the CircuitBreaker status ("Closed", "Open", "HalfOpen").
func ParseState(s string) (State, error) {
	switch s {
	case "closed", "Closed":
		return Closed, nil
	case "open", "Open":
		return Open, nil
	case "half_open", "HalfOpen":
		return HalfOpen, nil
	}
	return 0, fmt.Errorf("breaker: unknown state %q", s)
}

// Mode says how far a breaker acts on its own verdict.
type Mode string

const (
	// ModeEnforce short-circuits calls when the circuit is open. The empty Mode means this.
	ModeEnforce Mode = "Enforce"
	// ModeMetricsOnly computes and reports the verdict exactly as Enforce would but never
	// short-circuits: a call Enforce would have refused runs, and its outcome is not recorded,
	// so the verdict a dry run reports is the one enforcing would have produced.
	ModeMetricsOnly Mode = "MetricsOnly"
	// ModeForcedOpen holds the circuit open and refuses every call until the mode changes.
	ModeForcedOpen Mode = "ForcedOpen"
	// ModeForcedClosed holds the circuit closed: every call runs and is recorded, and the
	// circuit never opens.
	ModeForcedClosed Mode = "ForcedClosed"
)

// Validate reports whether m is one of the four modes or empty (which means ModeEnforce).
func (m Mode) Validate() error {
	switch m {
	case "", ModeEnforce, ModeMetricsOnly, ModeForcedOpen, ModeForcedClosed:
		return nil
	}
	return &FieldError{Field: "mode", Value: string(m), Reason: "must be one of Enforce, MetricsOnly, ForcedOpen, ForcedClosed"}
}

// Policy configures a breaker. Its zero value is not usable (a zero duration or count is
// refused); start from [DefaultPolicy] and change what differs. Field names in errors are the
// ones of the rendered configuration ("openTimeout", "window", ...).
type Policy struct {
	// OpenTimeout is how long the circuit stays open before admitting probes. Must be > 0.
	OpenTimeout time.Duration
	// Window is the width of each of the two buckets the failure rate is judged over, so
	// the rate covers between one and two Windows of history. Must be > 0.
	Window time.Duration
	// FailureRatio is the share of calls in the window that must have failed for a failure
	// to open the circuit; reaching it exactly opens. Must be in (0, 1].
	FailureRatio float64
	// MinimumThroughput is how many calls the window must hold before the ratio is trusted.
	// Must be ≥ 1.
	MinimumThroughput int
	// SuccessThreshold is how many consecutive probe successes close a half-open circuit.
	// Must be ≥ 1.
	SuccessThreshold int
	// HalfOpenPermittedCalls caps the probes running at once while half-open. Must be ≥ 1.
	HalfOpenPermittedCalls int
	// Mode is how far the breaker acts on its verdict; "" means ModeEnforce.
	Mode Mode
	// SlowCallDuration, when set, makes a completed call that took at least this long
	// slow, whatever its outcome, and the circuit also opens when slow calls reach
	// SlowCallRatio of the window (DESIGN.md §5.13). 0 (the default) judges no call slow,
	// and costs the call path nothing. Must be ≥ 0.
	SlowCallDuration time.Duration
	// SlowCallRatio is the share of slow calls in a window of at least MinimumThroughput
	// calls at or above which the circuit opens; used only with SlowCallDuration. Must be
	// in (0, 1] when SlowCallDuration is set.
	SlowCallRatio float64
	// MaxOpenTimeout, when set, backs off the open period: the k-th consecutive open
	// period without a close in between lasts min(OpenTimeout × 2^(k-1), MaxOpenTimeout)
	// (§5.13). 0 (the default) keeps every open period at OpenTimeout. Must be 0 or at
	// least OpenTimeout.
	MaxOpenTimeout time.Duration
}

// DefaultPolicy returns the seed's defaults: a 30s open timeout, a 10s window, a 50% failure
// ratio over at least 20 calls, 2 probe successes to close, 1 probe at a time, Enforce; no
// slow-call judging (with a SlowCallRatio of 1 ready for when SlowCallDuration is set) and
// no backoff.
func DefaultPolicy() Policy {
	return Policy{
		OpenTimeout:            30 * time.Second,
		Window:                 10 * time.Second,
		FailureRatio:           0.5,
		MinimumThroughput:      20,
		SuccessThreshold:       2,
		HalfOpenPermittedCalls: 1,
		Mode:                   ModeEnforce,
		SlowCallRatio:          1,
	}
}

// Validate refuses only what would make a breaker meaningless; the tighter bounds of the
// CircuitBreaker resource are the operator's business, so that a library user with unusual
// needs (a 100ms window in a test, say) is not stopped. Every offending field is reported,
// each as a [*FieldError].
func (p Policy) Validate() error {
	var errs []error
	if p.OpenTimeout <= 0 {
		errs = append(errs, &FieldError{Field: "openTimeout", Value: p.OpenTimeout.String(), Reason: "must be greater than 0"})
	}
	if p.Window <= 0 {
		errs = append(errs, &FieldError{Field: "window", Value: p.Window.String(), Reason: "must be greater than 0"})
	}
	// The negated comparison also refuses NaN.
	if !(p.FailureRatio > 0 && p.FailureRatio <= 1) {
		errs = append(errs, &FieldError{Field: "failureRatio", Value: formatFloat(p.FailureRatio), Reason: "must be greater than 0 and at most 1"})
	}
	if p.MinimumThroughput < 1 {
		errs = append(errs, &FieldError{Field: "minimumThroughput", Value: fmt.Sprint(p.MinimumThroughput), Reason: "must be at least 1"})
	}
	if p.SuccessThreshold < 1 {
		errs = append(errs, &FieldError{Field: "successThreshold", Value: fmt.Sprint(p.SuccessThreshold), Reason: "must be at least 1"})
	}
	if p.HalfOpenPermittedCalls < 1 {
		errs = append(errs, &FieldError{Field: "halfOpenPermittedCalls", Value: fmt.Sprint(p.HalfOpenPermittedCalls), Reason: "must be at least 1"})
	}
	if err := p.Mode.Validate(); err != nil {
		errs = append(errs, err)
	}
	if p.SlowCallDuration < 0 {
		errs = append(errs, &FieldError{Field: "slowCallDuration", Value: p.SlowCallDuration.String(), Reason: "must be 0 (slow calls not judged) or greater"})
	}
	// The ratio matters only with slow-call judging on, but a value no breaker could
	// use is refused either way.
	if (p.SlowCallDuration > 0 || p.SlowCallRatio != 0) && !(p.SlowCallRatio > 0 && p.SlowCallRatio <= 1) {
		errs = append(errs, &FieldError{Field: "slowCallRatio", Value: formatFloat(p.SlowCallRatio), Reason: "must be greater than 0 and at most 1"})
	}
	switch {
	case p.MaxOpenTimeout < 0:
		errs = append(errs, &FieldError{Field: "maxOpenTimeout", Value: p.MaxOpenTimeout.String(), Reason: "must be 0 (no backoff) or greater"})
	case p.MaxOpenTimeout > 0 && p.OpenTimeout > 0 && p.MaxOpenTimeout < p.OpenTimeout:
		errs = append(errs, &FieldError{Field: "maxOpenTimeout", Value: p.MaxOpenTimeout.String(), Reason: "must be at least openTimeout (" + p.OpenTimeout.String() + ")"})
	}
	return errors.Join(errs...)
}

func formatFloat(f float64) string {
	if math.IsNaN(f) {
		return "NaN"
	}
	return fmt.Sprint(f)
}

// withDefaults returns p with the empty Mode spelled out, so that comparisons and
// Breaker.Policy see one spelling.
func (p Policy) withDefaults() Policy {
	if p.Mode == "" {
		p.Mode = ModeEnforce
	}
	return p
}

// openPeriod is how long the k-th consecutive open period lasts (§5.13): OpenTimeout, or
// with MaxOpenTimeout set min(OpenTimeout × 2^(k-1), MaxOpenTimeout).
func (p Policy) openPeriod(k int) time.Duration {
	if p.MaxOpenTimeout <= p.OpenTimeout || k <= 1 {
		return p.OpenTimeout
	}
	d := p.OpenTimeout
	for i := 1; i < k && d < p.MaxOpenTimeout; i++ {
		if d > p.MaxOpenTimeout/2 {
			return p.MaxOpenTimeout
		}
		d *= 2
	}
	return min(d, p.MaxOpenTimeout)
}

// longestOpen is the longest open period p allows (§5.13): MaxOpenTimeout with backoff,
// OpenTimeout without.
func (p Policy) longestOpen() time.Duration { return max(p.OpenTimeout, p.MaxOpenTimeout) }

// backoffReach is the first k whose open period is longestOpen: a count of consecutive
// open periods beyond it lengthens nothing. 1 without backoff.
func (p Policy) backoffReach() int {
	k, d := 1, p.OpenTimeout
	for d < p.MaxOpenTimeout {
		k++
		if d > p.MaxOpenTimeout/2 {
			break
		}
		d *= 2
	}
	return k
}

// FieldError says which policy field was refused and why.
type FieldError struct {
	Field  string // the field's name in the rendered configuration, e.g. "failureRatio"
	Value  string // the refused value, as text
	Reason string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("breaker: invalid %s %s: %s", e.Field, e.Value, e.Reason)
}
