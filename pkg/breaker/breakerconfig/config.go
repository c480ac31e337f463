package breakerconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// Config is one breaker's published configuration. Field order is the order of
// the rendered JSON, the policy's fields inline where Policy is embedded.
type Config struct {
	Name       string `json:"name"`
	Generation int64  `json:"generation"`
	// UID is the CircuitBreaker's UID: a breaker deleted and created again under
	// the same name is a new document, which pods report afresh.
	UID string `json:"uid,omitempty"`
	// Policy is the enforced policy, its fields at the document's top level.
	Policy
	Mode  string `json:"mode"`
	Scope string `json:"scope"`
	// RetryBudget and Throttle are the fleet-aware policies of docs/design.md §5.15 and
	// §5.16; each is left out when not set.
	RetryBudget *RetryBudget `json:"retryBudget,omitempty"`
	Throttle    *Throttle    `json:"throttle,omitempty"`
	// Fleet is what the operator counts of the pods that report the breaker, written
	// only with RetryBudget or Throttle (docs/design.md §4).
	Fleet *Fleet `json:"fleet,omitempty"`
	// Concurrency is the pod's share of the fleet's limit on calls in flight
	// (docs/design.md §12), written only while the CircuitBreaker has one.
	Concurrency *Concurrency `json:"concurrency,omitempty"`
	// Verdict is the fleet's shared verdict, written by the operator only for
	// scope Fleet and only while it has one (docs/design.md §5.12).
	Verdict *Verdict `json:"verdict,omitempty"`
	// Candidate is the policy the pods judge in shadow, written only while the
	// CircuitBreaker has one (docs/design.md §11).
	Candidate *Candidate `json:"candidate,omitempty"`
}

// Policy is a published policy: the document's own, the one its breaker enforces, and
// its candidate's (Candidate), under the same names and spellings. The operator renders
// every field (docs/design.md §3 resolved, each percent as a ratio), so a reader needs
// nothing else to run it; only the optional judgements are left out when not set.
type Policy struct {
	OpenTimeout            Duration `json:"openTimeout"`
	Window                 Duration `json:"window"`
	FailureRatio           float64  `json:"failureRatio"`
	MinimumThroughput      int      `json:"minimumThroughput"`
	SuccessThreshold       int      `json:"successThreshold"`
	HalfOpenPermittedCalls int      `json:"halfOpenPermittedCalls"`
	// SlowCallDuration and SlowCallRatio judge slow calls (docs/design.md §5.13); both are
	// left out when slow calls are not judged (a ratio left out is 1).
	SlowCallDuration Duration `json:"slowCallDuration,omitempty"`
	SlowCallRatio    float64  `json:"slowCallRatio,omitempty"`
	// MaxOpenTimeout backs off consecutive open periods up to it; left out for no
	// backoff.
	MaxOpenTimeout Duration `json:"maxOpenTimeout,omitempty"`
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
// verdict, retry budget, throttle, concurrency or fleet counts, or else every bad field of
// its policy.
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
	errs := c.problems("")
	switch c.Mode {
	case "", ModeEnforce, ModeMetricsOnly, ModeForcedOpen, ModeForcedClosed:
	default:
		errs = append(errs, fmt.Errorf("mode: must be one of %s, %s, %s, %s, got %q", ModeEnforce, ModeMetricsOnly, ModeForcedOpen, ModeForcedClosed, c.Mode))
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if c.Candidate != nil {
		return errors.Join(c.Candidate.problems("candidate.")...)
	}
	return nil
}

// validateFleetPolicies reports the first field of the retry budget, the throttle, the
// concurrency limit or the fleet counts that a reader must refuse. Only what makes them meaningless is refused
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
	if k := c.Concurrency; k != nil {
		if err := k.validate(); err != nil {
			return err
		}
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

// problems lists the fields of p no breaker could run, each named with prefix: a duration,
// ratio or count out of range, a backoff ceiling below the open timeout. The operator
// renders every field, so a zero one is a broken document, refused like any other bad
// value, although a zero field of the library's own Policy means its default. As the
// retry budget's and the throttle's, these bounds are the widest a breaker can use; the
// CRD's tighter ones are the operator's.
func (p Policy) problems(prefix string) []error {
	var errs []error
	refuse := func(field, want string, got any) {
		errs = append(errs, fmt.Errorf("%s%s: must be %s, got %v", prefix, field, want, got))
	}
	if p.OpenTimeout <= 0 {
		refuse("openTimeout", "greater than 0", time.Duration(p.OpenTimeout))
	}
	if p.Window <= 0 {
		refuse("window", "greater than 0", time.Duration(p.Window))
	}
	// The negated comparisons refuse NaN too, which a Go caller can set although no JSON
	// carries it.
	if !(p.FailureRatio > 0 && p.FailureRatio <= 1) {
		refuse("failureRatio", "greater than 0 and at most 1", p.FailureRatio)
	}
	for _, n := range []struct {
		field string
		v     int
	}{{"minimumThroughput", p.MinimumThroughput}, {"successThreshold", p.SuccessThreshold}, {"halfOpenPermittedCalls", p.HalfOpenPermittedCalls}} {
		if n.v < 1 {
			refuse(n.field, "at least 1", n.v)
		}
	}
	if p.SlowCallDuration < 0 {
		refuse("slowCallDuration", "at least 0 (0: no call is judged slow)", time.Duration(p.SlowCallDuration))
	}
	if !(p.SlowCallRatio >= 0 && p.SlowCallRatio <= 1) {
		refuse("slowCallRatio", "between 0 and 1 (0 or left out: 1)", p.SlowCallRatio)
	}
	switch {
	case p.MaxOpenTimeout < 0:
		refuse("maxOpenTimeout", "at least 0 (0: no backoff)", time.Duration(p.MaxOpenTimeout))
	case p.MaxOpenTimeout > 0 && p.OpenTimeout > 0 && p.MaxOpenTimeout < p.OpenTimeout:
		refuse("maxOpenTimeout", "at least "+prefix+"openTimeout ("+time.Duration(p.OpenTimeout).String()+")", time.Duration(p.MaxOpenTimeout))
	}
	return errs
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
	type wireConcurrency Concurrency
	var raw struct {
		wire
		rawDurations
		Verdict *struct {
			wireVerdict
			OpenTimeout *string `json:"openTimeout"`
		} `json:"verdict"`
		Concurrency *struct {
			wireConcurrency
			MaxWait  *string `json:"maxWait"`
			Baseline *string `json:"baseline"`
		} `json:"concurrency"`
		Candidate *struct {
			wireCandidate
			rawDurations
		} `json:"candidate"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&raw); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			// encoding/json names the embedded structs Parse reads a policy through.
			field := strings.NewReplacer("wireCandidate.", "", "wireConcurrency.", "", "Policy.", "").Replace(te.Field)
			return Config{}, fmt.Errorf("parse breaker config: %s: want %s, got JSON %s", field, te.Type, te.Value)
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
	if raw.Candidate != nil {
		cand := Candidate(raw.Candidate.wireCandidate)
		c.Candidate = &cand
	}
	durations := raw.durations("", &c.Policy)
	durations = append(durations, parsedDuration{"verdict.openTimeout", verdictOpenTimeout, verdictDuration(c.Verdict), true})
	if rc := raw.Concurrency; rc != nil {
		k := Concurrency(rc.wireConcurrency)
		c.Concurrency = &k
		durations = append(durations,
			parsedDuration{"concurrency.maxWait", rc.MaxWait, &k.MaxWait, true},
			parsedDuration{"concurrency.baseline", rc.Baseline, &k.Baseline, true})
	}
	if raw.Candidate != nil {
		durations = append(durations, raw.Candidate.durations("candidate.", &c.Candidate.Policy)...)
	}
	for _, d := range durations {
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

// rawDurations are a policy's duration fields as Parse reads them: strings first, so that a
// bad one is reported with its field name (encoding/json does not add it to an
// Unmarshaler's error). Embedded beside the policy, they take its duration fields' JSON
// names over it.
type rawDurations struct {
	OpenTimeout      *string `json:"openTimeout"`
	Window           *string `json:"window"`
	SlowCallDuration *string `json:"slowCallDuration"`
	MaxOpenTimeout   *string `json:"maxOpenTimeout"`
}

// durations are the duration fields of p Parse reads, named with prefix.
func (r *rawDurations) durations(prefix string, p *Policy) []parsedDuration {
	return []parsedDuration{
		{prefix + "openTimeout", r.OpenTimeout, &p.OpenTimeout, false},
		{prefix + "window", r.Window, &p.Window, false},
		{prefix + "slowCallDuration", r.SlowCallDuration, &p.SlowCallDuration, true},
		{prefix + "maxOpenTimeout", r.MaxOpenTimeout, &p.MaxOpenTimeout, true},
	}
}

// parsedDuration is a duration field of the document as Parse reads it: its path, the
// string read (nil if absent), and where its value goes.
type parsedDuration struct {
	field    string
	in       *string
	out      *Duration
	optional bool
}

// verdictDuration is where a verdict's open period goes; nil without a verdict, when
// Parse has no verdict.openTimeout to read either.
func verdictDuration(v *Verdict) *Duration {
	if v == nil {
		return nil
	}
	return &v.OpenTimeout
}
