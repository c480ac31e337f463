package breakerconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
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

// RetryBudget is breaker.RetryBudget on the wire.
type RetryBudget struct {
	Percent      int `json:"percent"`
	MinPerSecond int `json:"minPerSecond"`
}

// Throttle is breaker.Throttle on the wire: k is a JSON number.
type Throttle struct {
	K float64 `json:"k"`
}

// Fleet is breaker.Fleet on the wire: the pods that report the breaker, and the
// requests and accepts of the median reporting pod's window (docs/design.md §4, §5.17).
type Fleet struct {
	Pods     int   `json:"pods"`
	Requests int64 `json:"requests"`
	Accepts  int64 `json:"accepts"`
}

// Breaker returns f as the library takes it.
func (f Fleet) Breaker() breaker.Fleet {
	return breaker.Fleet{Pods: f.Pods, Requests: f.Requests, Accepts: f.Accepts}
}

// Verdict is a fleet-wide verdict: the state and when it was reached, and for
// an open verdict the open period every pod keeps (docs/design.md §5.13).
type Verdict struct {
	State string    `json:"state"`
	Since time.Time `json:"since"`
	// ConsecutiveOpens is how many open periods in a row the fleet has had,
	// counting this one (breaker.Verdict.ConsecutiveOpens).
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

// FromPolicy returns the Config that publishes p under name.
func FromPolicy(name string, generation int64, p breaker.Policy, scope string) Config {
	mode := p.Mode
	if mode == "" {
		mode = ModeEnforce
	}
	c := Config{
		Name:                   name,
		Generation:             generation,
		OpenTimeout:            Duration(p.OpenTimeout),
		Window:                 Duration(p.Window),
		FailureRatio:           p.FailureRatio,
		MinimumThroughput:      p.MinimumThroughput,
		SuccessThreshold:       p.SuccessThreshold,
		HalfOpenPermittedCalls: p.HalfOpenPermittedCalls,
		Mode:                   string(mode),
		Scope:                  scope,
		MaxOpenTimeout:         Duration(p.MaxOpenTimeout),
	}
	if p.SlowCallDuration > 0 {
		c.SlowCallDuration, c.SlowCallRatio = Duration(p.SlowCallDuration), p.SlowCallRatio
	}
	if b := p.RetryBudget; b != nil {
		c.RetryBudget = &RetryBudget{Percent: b.Percent, MinPerSecond: b.MinPerSecond}
	}
	if t := p.Throttle; t != nil {
		c.Throttle = &Throttle{K: t.K}
	}
	return c
}

// Policy returns the breaker policy c describes, or an error naming the first
// field that makes it invalid.
func (c Config) Policy() (breaker.Policy, error) {
	p := breaker.Policy{
		OpenTimeout:            time.Duration(c.OpenTimeout),
		Window:                 time.Duration(c.Window),
		FailureRatio:           c.FailureRatio,
		MinimumThroughput:      c.MinimumThroughput,
		SuccessThreshold:       c.SuccessThreshold,
		HalfOpenPermittedCalls: c.HalfOpenPermittedCalls,
		Mode:                   breaker.Mode(c.Mode),
		SlowCallDuration:       time.Duration(c.SlowCallDuration),
		SlowCallRatio:          c.SlowCallRatio,
		MaxOpenTimeout:         time.Duration(c.MaxOpenTimeout),
	}
	if p.SlowCallRatio == 0 {
		p.SlowCallRatio = 1 // DefaultPolicy's, and the CRD's slowCallRatePercent 100
	}
	// Fresh values, never c's: a policy handed to a breaker shares nothing with a config
	// the caller may still change.
	if b := c.RetryBudget; b != nil {
		p.RetryBudget = &breaker.RetryBudget{Percent: b.Percent, MinPerSecond: b.MinPerSecond}
	}
	if t := c.Throttle; t != nil {
		p.Throttle = &breaker.Throttle{K: t.K}
	}
	// A zero field of a breaker.Policy means the default, but the operator renders every
	// field: a zero here is a broken document, refused like any other bad value.
	var errs []error
	for _, f := range []struct {
		field string
		zero  bool
		value string
	}{
		{"openTimeout", p.OpenTimeout == 0, p.OpenTimeout.String()},
		{"window", p.Window == 0, p.Window.String()},
		{"failureRatio", p.FailureRatio == 0, "0"},
		{"minimumThroughput", p.MinimumThroughput == 0, "0"},
		{"successThreshold", p.SuccessThreshold == 0, "0"},
		{"halfOpenPermittedCalls", p.HalfOpenPermittedCalls == 0, "0"},
	} {
		if f.zero {
			errs = append(errs, &breaker.FieldError{Field: f.field, Value: f.value, Reason: "must be greater than 0"})
		}
	}
	if err := errors.Join(append(errs, p.Validate())...); err != nil {
		return breaker.Policy{}, err
	}
	return p, nil
}

// Validate reports the first field of c that a reader must refuse.
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
	_, err := c.Policy()
	return err
}

// validateFleetPolicies reports the first field of the retry budget, the throttle or the
// fleet counts that a reader must refuse. Only what makes them meaningless is refused
// (a negative count, k below 1); the CRD's tighter bounds (docs/design.md §3) are the
// operator's. It runs before the breaker's own Validate, which may judge the same
// fields: the first error is the one reported.
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

// ParseState reads a state in either of the spellings Fusebox uses: the wire one
// (StateClosed, StateOpen, StateHalfOpen) or the telemetry one of breaker.State.String
// ("closed", "open", "half_open").
func ParseState(s string) (breaker.State, error) {
	switch s {
	case "closed", StateClosed:
		return breaker.Closed, nil
	case "open", StateOpen:
		return breaker.Open, nil
	case "half_open", StateHalfOpen:
		return breaker.HalfOpen, nil
	}
	return 0, fmt.Errorf("breakerconfig: unknown state %q", s)
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
