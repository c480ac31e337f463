package breaker

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/internal/circuit"
)

// State is the state of a circuit: Closed, Open or HalfOpen. Its String method spells
// them "closed", "open" and "half_open", as telemetry does. It is the type package observe
// speaks of too.
type State = circuit.State

// The three states of a circuit. The zero value is Closed.
const (
	Closed   = circuit.Closed
	Open     = circuit.Open
	HalfOpen = circuit.HalfOpen
)

// Mode says how far a breaker acts on its own verdict. Its values are the ones the
// published configuration spells.
type Mode string

const (
	// ModeEnforce short-circuits calls when the circuit is open. The empty Mode means this.
	ModeEnforce Mode = breakerconfig.ModeEnforce
	// ModeMetricsOnly computes and reports the verdict exactly as Enforce would but never
	// short-circuits: a call Enforce would have refused runs, and its outcome is not recorded,
	// so the verdict a dry run reports is the one enforcing would have produced.
	ModeMetricsOnly Mode = breakerconfig.ModeMetricsOnly
	// ModeForcedOpen holds the circuit open and refuses every call until the mode changes.
	ModeForcedOpen Mode = breakerconfig.ModeForcedOpen
	// ModeForcedClosed holds the circuit closed: every call runs and is recorded, and the
	// circuit never opens.
	ModeForcedClosed Mode = breakerconfig.ModeForcedClosed
)

// validate reports whether m is one of the four modes or empty (which means ModeEnforce).
func (m Mode) validate() error {
	switch m {
	case "", ModeEnforce, ModeMetricsOnly, ModeForcedOpen, ModeForcedClosed:
		return nil
	}
	return &fieldError{Field: "mode", Value: string(m), Reason: "must be one of Enforce, MetricsOnly, ForcedOpen, ForcedClosed"}
}

// Policy configures a breaker. Like gobreaker's Settings, its zero value works: every
// field left at zero takes [DefaultPolicy]'s value, so Policy{OpenTimeout: time.Minute}
// is the defaults with a one-minute open timeout, and [Breaker.Policy] reports the values
// in force. [Policy.Validate] still refuses what no breaker could use (a negative
// duration or count, a ratio above 1). Field names in errors are the ones of the rendered
// configuration ("openTimeout", "window", ...).
type Policy struct {
	// OpenTimeout is how long the circuit stays open before admitting probes. 0 means 30s.
	OpenTimeout time.Duration
	// Window is the width of each of the two buckets the failure rate is judged over, so
	// the rate covers between one and two Windows of history. 0 means 10s.
	Window time.Duration
	// FailureRatio is the share of calls in the window that must have failed for a failure
	// to open the circuit; reaching it exactly opens. At most 1; 0 means 0.5.
	FailureRatio float64
	// MinimumThroughput is how many calls the window must hold before the ratio is trusted.
	// 0 means 20.
	MinimumThroughput int
	// SuccessThreshold is how many consecutive probe successes close a half-open circuit.
	// 0 means 2.
	SuccessThreshold int
	// HalfOpenPermittedCalls caps the probes running at once while half-open. 0 means 1.
	HalfOpenPermittedCalls int
	// Mode is how far the breaker acts on its verdict; "" means ModeEnforce.
	Mode Mode
	// SlowCallDuration, when set, makes a completed call that took at least this long
	// slow, whatever its outcome, and the circuit also opens when slow calls reach
	// SlowCallRatio of the window (docs/semantics.md, "Slow calls"). 0 (the default)
	// judges no call slow, and costs the call path nothing.
	SlowCallDuration time.Duration
	// SlowCallRatio is the share of slow calls in a window of at least MinimumThroughput
	// calls at or above which the circuit opens; used only with SlowCallDuration. At most
	// 1; 0 means 1.
	SlowCallRatio float64
	// MaxOpenTimeout, when set, backs off the open period: the k-th consecutive open
	// period without a close in between lasts min(OpenTimeout × 2^(k-1), MaxOpenTimeout)
	// (docs/semantics.md, "Backed-off open periods"). 0 (the default) keeps every open
	// period at OpenTimeout. When set, at least OpenTimeout.
	MaxOpenTimeout time.Duration
	// RetryBudget, when set, bounds the retries [Retry] and [Breaker.AllowRetry] allow
	// over the window (docs/semantics.md, "Retry budget"). nil: retries are not budgeted.
	RetryBudget *RetryBudget
	// Throttle, when set, makes a closed breaker reject calls locally with the adaptive
	// throttling probability (docs/semantics.md, "Adaptive throttling"). nil: no
	// throttling, and the call path pays nothing for it.
	Throttle *Throttle
	// MaxInFlight, when set, is this pod's limit on calls in flight through the breaker
	// (docs/semantics.md, "Concurrency limit"): a call over it waits up to MaxWait for a
	// slot and is then refused with an error matching ErrConcurrencyLimited, a refusal
	// that is not a failure and not a short-circuit of the circuit. Under a CircuitBreaker
	// it is the pod's share of spec.concurrency.maxInFlight, which the operator divides
	// among the breaker's pods. 0 (the default): no limit, and the call path pays nothing
	// for it. A limit above 1,048,575 counts as that (a pod's calls in flight are counted
	// in 20 bits).
	MaxInFlight int
	// MaxWait is how long a call over MaxInFlight waits for a slot before it is refused;
	// 0 (the default) refuses it at once. Used only with MaxInFlight.
	MaxWait time.Duration
	// Adaptive, when set, lowers the limit below MaxInFlight while the dependency answers
	// slower than its baseline, and raises it back while it does not (docs/semantics.md,
	// "Adaptive concurrency"): never above MaxInFlight, never below Adaptive.MinLimit.
	// Used only with MaxInFlight; nil: the limit is MaxInFlight.
	Adaptive *AdaptiveConcurrency
}

// RetryBudget bounds retries over the window (docs/design.md §5.15): at most Percent% of
// the window's first attempts, plus this pod's share of MinPerSecond, the fleet's floor.
type RetryBudget struct {
	// Percent of first attempts that may be retried, 0–100.
	Percent int
	// MinPerSecond is the floor of retries per second the whole fleet may make whatever
	// the first attempts; each pod gets MinPerSecond / Fleet.Pods of it.
	MinPerSecond int
}

// Throttle is client-side adaptive throttling (docs/design.md §5.16).
type Throttle struct {
	// K is how many requests per accepted one the breaker lets through before it starts
	// rejecting locally: at least 1 (2 is the usual choice).
	K float64
}

// AdaptiveConcurrency is a gradient limiter under Policy.MaxInFlight (docs/design.md
// §5.18): about once a second it multiplies the limit by Tolerance × baseline / recent
// latency, kept between 0.5 and 1, and adds a small allowance, so that the limit falls
// while the dependency answers more than Tolerance times slower than its baseline and
// climbs back while it does not. The baseline never exceeds the fleet's
// ([Fleet].Baseline), which keeps it from drifting up during a long incident.
type AdaptiveConcurrency struct {
	// Tolerance is how many times its baseline latency the dependency may take before
	// the limit is cut: at least 1; 0 means 1.5. (The CircuitBreaker resource allows up
	// to 5.)
	Tolerance float64
	// MinLimit is the lowest the limit is cut to: at least 1; 0 means 1. MaxInFlight
	// wins over it when it is smaller.
	MinLimit int
}

// The defaults of AdaptiveConcurrency's zero fields.
const (
	defaultTolerance = 1.5
	defaultMinLimit  = 1
)

// DefaultPolicy returns the defaults of the PHP library whose semantics Fusebox follows
// (docs/design.md §5): a 30s open timeout, a 10s window, a 50% failure ratio over at least
// 20 calls, 2 probe successes to close, 1 probe at a time, Enforce; no slow-call judging
// (with a SlowCallRatio of 1 ready for when SlowCallDuration is set) and no backoff. It is
// what the zero Policy means.
func DefaultPolicy() Policy {
	// The values are the ones the operator fills into a CircuitBreaker, which the wire
	// states once for both.
	return Policy{
		OpenTimeout:            breakerconfig.DefaultOpenTimeout,
		Window:                 breakerconfig.DefaultWindow,
		FailureRatio:           breakerconfig.DefaultFailureRatePercent / 100.0,
		MinimumThroughput:      breakerconfig.DefaultMinimumThroughput,
		SuccessThreshold:       breakerconfig.DefaultSuccessThreshold,
		HalfOpenPermittedCalls: breakerconfig.DefaultHalfOpenPermittedCalls,
		Mode:                   ModeEnforce,
		SlowCallRatio:          breakerconfig.DefaultSlowCallRatePercent / 100.0,
	}
}

// Validate refuses only what would make a breaker meaningless; the tighter bounds of the
// CircuitBreaker resource are the operator's business, so that a library user with unusual
// needs (a 100ms window in a test, say) is not stopped. A zero field is not refused: it
// takes the default (see [Policy]). Every offending field is reported, joined, each
// error naming the field by its rendered name and the value refused:
// `breaker: invalid failureRatio 2: must be between 0 and 1 (0 means the default)`.
func (p Policy) Validate() error {
	var errs []error
	for _, d := range []struct {
		field string
		v     time.Duration
	}{{"openTimeout", p.OpenTimeout}, {"window", p.Window}, {"slowCallDuration", p.SlowCallDuration}, {"maxOpenTimeout", p.MaxOpenTimeout}, {"concurrency.maxWait", p.MaxWait}} {
		if d.v < 0 {
			errs = append(errs, &fieldError{Field: d.field, Value: d.v.String(), Reason: "must not be negative (0 means the default)"})
		}
	}
	for _, r := range []struct {
		field string
		v     float64
	}{{"failureRatio", p.FailureRatio}, {"slowCallRatio", p.SlowCallRatio}} {
		// The negated comparison also refuses NaN.
		if !(r.v >= 0 && r.v <= 1) {
			errs = append(errs, &fieldError{Field: r.field, Value: formatFloat(r.v), Reason: "must be between 0 and 1 (0 means the default)"})
		}
	}
	for _, c := range []struct {
		field string
		v     int
	}{{"minimumThroughput", p.MinimumThroughput}, {"successThreshold", p.SuccessThreshold}, {"halfOpenPermittedCalls", p.HalfOpenPermittedCalls}} {
		if c.v < 0 {
			errs = append(errs, &fieldError{Field: c.field, Value: fmt.Sprint(c.v), Reason: "must be at least 1 (0 means the default)"})
		}
	}
	if err := p.Mode.validate(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, p.validateBudgetAndThrottle()...)
	errs = append(errs, p.validateConcurrency()...)
	if d := p.withDefaults(); p.MaxOpenTimeout > 0 && d.OpenTimeout > 0 && p.MaxOpenTimeout < d.OpenTimeout {
		errs = append(errs, &fieldError{Field: "maxOpenTimeout", Value: p.MaxOpenTimeout.String(), Reason: "must be at least openTimeout (" + d.OpenTimeout.String() + ")"})
	}
	return errors.Join(errs...)
}

func formatFloat(f float64) string {
	if math.IsNaN(f) {
		return "NaN"
	}
	return fmt.Sprint(f)
}

// withDefaults returns p with every zero field set to DefaultPolicy's value, so that
// comparisons and Breaker.Policy see the values in force.
func (p Policy) withDefaults() Policy {
	d := DefaultPolicy()
	if p.OpenTimeout == 0 {
		p.OpenTimeout = d.OpenTimeout
	}
	if p.Window == 0 {
		p.Window = d.Window
	}
	if p.FailureRatio == 0 {
		p.FailureRatio = d.FailureRatio
	}
	if p.MinimumThroughput == 0 {
		p.MinimumThroughput = d.MinimumThroughput
	}
	if p.SuccessThreshold == 0 {
		p.SuccessThreshold = d.SuccessThreshold
	}
	if p.HalfOpenPermittedCalls == 0 {
		p.HalfOpenPermittedCalls = d.HalfOpenPermittedCalls
	}
	if p.Mode == "" {
		p.Mode = d.Mode
	}
	if p.SlowCallRatio == 0 {
		p.SlowCallRatio = d.SlowCallRatio
	}
	p = p.clone()
	if a := p.Adaptive; a != nil {
		if a.Tolerance == 0 {
			a.Tolerance = defaultTolerance
		}
		if a.MinLimit == 0 {
			a.MinLimit = defaultMinLimit
		}
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

// maxAdoptedOpens bounds the count of consecutive open periods a verdict may set: far past
// any backoff (2^30 doublings), and with room for every open this process adds after it
// inside the int32 a BreakerReport carries.
const maxAdoptedOpens = 1 << 30

// fieldError says which policy field was refused and why.
type fieldError struct {
	Field  string // the field's name in the rendered configuration, e.g. "failureRatio"
	Value  string // the refused value, as text
	Reason string
}

func (e *fieldError) Error() string {
	return fmt.Sprintf("breaker: invalid %s %s: %s", e.Field, e.Value, e.Reason)
}
