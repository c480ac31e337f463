package breakerconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
)

// Config is one breaker's published configuration. Field order is the order of
// the rendered JSON.
type Config struct {
	Name       string `json:"name"`
	Generation int64  `json:"generation"`
	// UID is the CircuitBreaker's UID: a breaker deleted and created again under
	// the same name is a new document, which pods report afresh.
	UID                    string   `json:"uid,omitempty"`
	OpenTimeout            Duration `json:"openTimeout"`
	Window                 Duration `json:"window"`
	FailureRatio           float64  `json:"failureRatio"`
	MinimumThroughput      int      `json:"minimumThroughput"`
	SuccessThreshold       int      `json:"successThreshold"`
	HalfOpenPermittedCalls int      `json:"halfOpenPermittedCalls"`
	Mode                   string   `json:"mode"`
	Scope                  string   `json:"scope"`
	// SlowCallDuration and SlowCallRatio judge slow calls (docs/design.md §5.13); both are
	// left out when slow calls are not judged.
	SlowCallDuration Duration `json:"slowCallDuration,omitempty"`
	SlowCallRatio    float64  `json:"slowCallRatio,omitempty"`
	// MaxOpenTimeout backs off consecutive open periods up to it; left out for no
	// backoff.
	MaxOpenTimeout Duration `json:"maxOpenTimeout,omitempty"`
	// RetryBudget and Throttle are the fleet-aware policies of docs/design.md §5.15 and
	// §5.16; each is left out when not set.
	RetryBudget *RetryBudget `json:"retryBudget,omitempty"`
	Throttle    *Throttle    `json:"throttle,omitempty"`
	// Fleet is what the operator counts of the pods that report the breaker, written
	// only with RetryBudget or Throttle (docs/design.md §4).
	Fleet *Fleet `json:"fleet,omitempty"`
	// Verdict is the fleet's shared verdict, written by the operator only for
	// scope Fleet and only while it has one (docs/design.md §5.12).
	Verdict *Verdict `json:"verdict,omitempty"`
}

// RetryBudget is the retry budget of docs/design.md §5.15 on the wire.
type RetryBudget struct {
	Percent      int `json:"percent"`
	MinPerSecond int `json:"minPerSecond"`
}

// Throttle is the adaptive throttling of docs/design.md §5.16 on the wire: k is a JSON
// number.
type Throttle struct {
	K float64 `json:"k"`
}

// Fleet is what the operator counts of the pods that report the breaker, and the
// requests and accepts of the median reporting pod's window (docs/design.md §4, §5.17).
type Fleet struct {
	Pods     int   `json:"pods"`
	Requests int64 `json:"requests"`
	Accepts  int64 `json:"accepts"`
}

// Verdict is a fleet-wide verdict: the state and when it was reached, and for
// an open verdict the open period every pod keeps (docs/design.md §5.13).
type Verdict struct {
	State string    `json:"state"`
	Since time.Time `json:"since"`
	// ConsecutiveOpens is how many open periods in a row the fleet has had,
	// counting this one (docs/design.md §5.13).
	ConsecutiveOpens int `json:"consecutiveOpens,omitempty"`
	// OpenTimeout is the length of this open period; left out, a pod uses its
	// own policy's.
	OpenTimeout Duration `json:"openTimeout,omitempty"`
}

// Duration is a time.Duration written in time.ParseDuration syntax ("30s").
type Duration time.Duration

// MarshalJSON writes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads a duration string such as "1m30s".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration string such as \"30s\", got %s", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// Validate reports what a reader must refuse in c: the first bad field of its identity,
// verdict, retry budget, throttle or fleet counts, or else every bad field of its policy.
// A document it accepts is one every breaker can run: the pods turn it into their
// library's policy without judging it again (pkg/breaker/kube's PolicyOf).
func (c Config) Validate() error {
	if c.Name == "" {
		return fmt.Errorf("name: must not be empty")
	}
	switch c.Scope {
	case "", ScopePod, ScopeFleet:
	default:
		return fmt.Errorf("scope: unknown scope %q (want %s or %s)", c.Scope, ScopePod, ScopeFleet)
	}
	if v := c.Verdict; v != nil {
		switch v.State {
		case StateClosed, StateOpen, StateHalfOpen:
		default:
			return fmt.Errorf("verdict.state: unknown state %q", v.State)
		}
		if v.Since.IsZero() {
			return fmt.Errorf("verdict.since: must be set")
		}
		if v.ConsecutiveOpens < 0 {
			return fmt.Errorf("verdict.consecutiveOpens: must not be negative, got %d", v.ConsecutiveOpens)
		}
		if v.OpenTimeout < 0 {
			return fmt.Errorf("verdict.openTimeout: must not be negative, got %s", time.Duration(v.OpenTimeout))
		}
	}
	if err := c.validateFleetPolicies(); err != nil {
		return err
	}
	return c.validatePolicy()
}

// validateFleetPolicies reports the first field of the retry budget, the throttle or the
// fleet counts that a reader must refuse. Only what makes them meaningless is refused
// (a negative count, k below 1); the CRD's tighter bounds (docs/design.md §3) are the
// operator's.
func (c Config) validateFleetPolicies() error {
	if b := c.RetryBudget; b != nil {
		if b.Percent < 0 || b.Percent > 100 {
			return fmt.Errorf("retryBudget.percent: must be between 0 and 100, got %d", b.Percent)
		}
		if b.MinPerSecond < 0 {
			return fmt.Errorf("retryBudget.minPerSecond: must not be negative, got %d", b.MinPerSecond)
		}
	}
	if t := c.Throttle; t != nil && !(t.K >= 1 && t.K <= math.MaxFloat64) {
		// Written so that NaN, which no JSON carries but a Go caller might, fails too.
		return fmt.Errorf("throttle.k: must be a finite number of at least 1, got %v", t.K)
	}
	if f := c.Fleet; f != nil {
		for _, n := range []struct {
			field string
			v     int64
		}{{"fleet.pods", int64(f.Pods)}, {"fleet.requests", f.Requests}, {"fleet.accepts", f.Accepts}} {
			if n.v < 0 {
				return fmt.Errorf("%s: must not be negative, got %d", n.field, n.v)
			}
		}
	}
	return nil
}

// validatePolicy refuses the policy fields no breaker could run: a duration, ratio or count
// out of range, a mode that is none of the four, a backoff ceiling below the open timeout.
// The operator renders every field, so a zero one is a broken document, refused like any
// other bad value, although a zero field of the library's own Policy means its default.
// As the retry budget's and the throttle's, these bounds are the widest a breaker can
// use; the CRD's tighter ones are the operator's.
func (c Config) validatePolicy() error {
	var errs []error
	refuse := func(field, want string, got any) {
		errs = append(errs, fmt.Errorf("%s: must be %s, got %v", field, want, got))
	}
	if c.OpenTimeout <= 0 {
		refuse("openTimeout", "greater than 0", time.Duration(c.OpenTimeout))
	}
	if c.Window <= 0 {
		refuse("window", "greater than 0", time.Duration(c.Window))
	}
	// The negated comparisons refuse NaN too, which a Go caller can set although no JSON
	// carries it.
	if !(c.FailureRatio > 0 && c.FailureRatio <= 1) {
		refuse("failureRatio", "greater than 0 and at most 1", c.FailureRatio)
	}
	for _, n := range []struct {
		field string
		v     int
	}{{"minimumThroughput", c.MinimumThroughput}, {"successThreshold", c.SuccessThreshold}, {"halfOpenPermittedCalls", c.HalfOpenPermittedCalls}} {
		if n.v < 1 {
			refuse(n.field, "at least 1", n.v)
		}
	}
	switch c.Mode {
	case "", ModeEnforce, ModeMetricsOnly, ModeForcedOpen, ModeForcedClosed:
	default:
		refuse("mode", "one of "+ModeEnforce+", "+ModeMetricsOnly+", "+ModeForcedOpen+", "+ModeForcedClosed, strconv.Quote(c.Mode))
	}
	if c.SlowCallDuration < 0 {
		refuse("slowCallDuration", "at least 0 (0: no call is judged slow)", time.Duration(c.SlowCallDuration))
	}
	if !(c.SlowCallRatio >= 0 && c.SlowCallRatio <= 1) {
		refuse("slowCallRatio", "between 0 and 1 (0 or left out: 1)", c.SlowCallRatio)
	}
	switch {
	case c.MaxOpenTimeout < 0:
		refuse("maxOpenTimeout", "at least 0 (0: no backoff)", time.Duration(c.MaxOpenTimeout))
	case c.MaxOpenTimeout > 0 && c.OpenTimeout > 0 && c.MaxOpenTimeout < c.OpenTimeout:
		refuse("maxOpenTimeout", "at least openTimeout ("+time.Duration(c.OpenTimeout).String()+")", time.Duration(c.MaxOpenTimeout))
	}
	return errors.Join(errs...)
}

// Marshal renders c as the published JSON document.
func Marshal(c Config) ([]byte, error) {
	return json.MarshalIndent(c, "", "  ")
}

// Parse reads a published document. Unknown fields are ignored; a document
// that does not parse or validate is refused whole, with an error naming the
// field.
func Parse(data []byte) (Config, error) {
	// Durations are decoded as strings first so a bad one is reported with its
	// field name: encoding/json does not add it to an Unmarshaler's error.
	type wire Config
	type wireVerdict Verdict
	var raw struct {
		wire
		OpenTimeout      *string `json:"openTimeout"`
		Window           *string `json:"window"`
		SlowCallDuration *string `json:"slowCallDuration"`
		MaxOpenTimeout   *string `json:"maxOpenTimeout"`
		Verdict          *struct {
			wireVerdict
			OpenTimeout *string `json:"openTimeout"`
		} `json:"verdict"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&raw); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return Config{}, fmt.Errorf("parse breaker config: %s: want %s, got JSON %s", te.Field, te.Type, te.Value)
		}
		return Config{}, fmt.Errorf("parse breaker config: %w", err)
	}
	if dec.More() {
		return Config{}, errors.New("parse breaker config: trailing data after the JSON object")
	}
	c := Config(raw.wire)
	var verdictOpenTimeout *string
	if raw.Verdict != nil {
		v := Verdict(raw.Verdict.wireVerdict)
		c.Verdict, verdictOpenTimeout = &v, raw.Verdict.OpenTimeout
	}
	for _, d := range []struct {
		field    string
		in       *string
		out      *Duration
		optional bool
	}{
		{"openTimeout", raw.OpenTimeout, &c.OpenTimeout, false},
		{"window", raw.Window, &c.Window, false},
		{"slowCallDuration", raw.SlowCallDuration, &c.SlowCallDuration, true},
		{"maxOpenTimeout", raw.MaxOpenTimeout, &c.MaxOpenTimeout, true},
		{"verdict.openTimeout", verdictOpenTimeout, verdictDuration(c.Verdict), true},
	} {
		if d.in == nil {
			if d.optional {
				continue
			}
			return Config{}, fmt.Errorf("invalid breaker config %q: %s: missing", c.Name, d.field)
		}
		v, err := time.ParseDuration(*d.in)
		if err != nil {
			return Config{}, fmt.Errorf("invalid breaker config %q: %s: %w", c.Name, d.field, err)
		}
		*d.out = Duration(v)
	}
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("invalid breaker config %q: %w", c.Name, err)
	}
	return c, nil
}

// verdictDuration is where a verdict's open period goes; nil without a verdict, when
// Parse has no verdict.openTimeout to read either.
func verdictDuration(v *Verdict) *Duration {
	if v == nil {
		return nil
	}
	return &v.OpenTimeout
}
