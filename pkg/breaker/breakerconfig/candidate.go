package breakerconfig

import (
	"fmt"
	"time"
)

// Candidate is a policy the pods judge in shadow beside the enforced one (docs/design.md
// §11): the document's policy fields, under the same names and spellings, each resolved
// by the operator (a field the CircuitBreaker's spec.candidate leaves unset is rendered
// with the spec's value), so a reader needs nothing else to judge it. The shadow never
// refuses a call, so the candidate has no mode; and it shares no verdict, so no scope.
type Candidate struct {
	OpenTimeout            Duration `json:"openTimeout"`
	Window                 Duration `json:"window"`
	FailureRatio           float64  `json:"failureRatio"`
	MinimumThroughput      int      `json:"minimumThroughput"`
	SuccessThreshold       int      `json:"successThreshold"`
	HalfOpenPermittedCalls int      `json:"halfOpenPermittedCalls"`
	// SlowCallDuration and SlowCallRatio are left out when the candidate judges no call
	// slow (a ratio left out is 1); MaxOpenTimeout when it backs off no open period.
	SlowCallDuration Duration `json:"slowCallDuration,omitempty"`
	SlowCallRatio    float64  `json:"slowCallRatio,omitempty"`
	MaxOpenTimeout   Duration `json:"maxOpenTimeout,omitempty"`
}

// validate reports every field of c a reader must refuse, each named under
// "candidate.". As for the enforced fields, a zero is a broken document (the operator
// renders every field), and only what makes a breaker meaningless is refused: the CRD's
// tighter bounds are the operator's.
func (c *Candidate) validate() []error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("candidate.%s: "+format, append([]any{field}, args...)...))
	}
	for _, d := range []struct {
		field string
		v     Duration
	}{{"openTimeout", c.OpenTimeout}, {"window", c.Window}} {
		if d.v <= 0 {
			bad(d.field, "must be greater than 0, got %s", time.Duration(d.v))
		}
	}
	ratio := func(field string, r float64) {
		// Written so that NaN, which no JSON carries but a Go caller might, fails too.
		if !(r > 0 && r <= 1) {
			bad(field, "must be greater than 0 and at most 1, got %v", r)
		}
	}
	ratio("failureRatio", c.FailureRatio)
	for _, n := range []struct {
		field string
		v     int
	}{{"minimumThroughput", c.MinimumThroughput}, {"successThreshold", c.SuccessThreshold}, {"halfOpenPermittedCalls", c.HalfOpenPermittedCalls}} {
		if n.v <= 0 {
			bad(n.field, "must be greater than 0, got %d", n.v)
		}
	}
	if c.SlowCallDuration < 0 {
		bad("slowCallDuration", "must not be negative, got %s", time.Duration(c.SlowCallDuration))
	}
	// Left out (0), the ratio is 1, as the enforced policy's is (Config.Policy).
	if r := c.SlowCallRatio; r != 0 && !(r > 0 && r <= 1) {
		bad("slowCallRatio", "must be greater than 0 and at most 1, got %v", r)
	}
	switch {
	case c.MaxOpenTimeout < 0:
		bad("maxOpenTimeout", "must not be negative, got %s", time.Duration(c.MaxOpenTimeout))
	case c.MaxOpenTimeout > 0 && c.MaxOpenTimeout < c.OpenTimeout:
		bad("maxOpenTimeout", "must be at least candidate.openTimeout (%s), got %s", time.Duration(c.OpenTimeout), time.Duration(c.MaxOpenTimeout))
	}
	return errs
}

// rawCandidate is a Candidate as Parse reads it: durations as strings first, so that a
// bad one is reported with its field name.
type rawCandidate struct {
	wireCandidate
	OpenTimeout      *string `json:"openTimeout"`
	Window           *string `json:"window"`
	SlowCallDuration *string `json:"slowCallDuration"`
	MaxOpenTimeout   *string `json:"maxOpenTimeout"`
}

type wireCandidate Candidate

// candidateDurations are the duration fields of a candidate Parse reads, with where
// each goes; none without a candidate.
func (r *rawCandidate) durations(c *Candidate) []parsedDuration {
	if r == nil {
		return nil
	}
	return []parsedDuration{
		{"candidate.openTimeout", r.OpenTimeout, &c.OpenTimeout, false},
		{"candidate.window", r.Window, &c.Window, false},
		{"candidate.slowCallDuration", r.SlowCallDuration, &c.SlowCallDuration, true},
		{"candidate.maxOpenTimeout", r.MaxOpenTimeout, &c.MaxOpenTimeout, true},
	}
}

// CandidateEntry is a report entry's candidate (ReportEntry.Candidate): what the pod's
// shadow judgement of the candidate did since it began, and what the enforced policy did
// over the same span. Its counts move with every call the candidate would refuse, so the
// pod writes them with its other changes, and on their own at most once a window.
type CandidateEntry struct {
	// State is the candidate's state (StateClosed, StateOpen, StateHalfOpen) and Since
	// when it was reached, to the millisecond.
	State string `json:"state"`
	Since Time   `json:"since"`
	// Opens is how many times the candidate opened since StartTime.
	Opens int64 `json:"opens"`
	// WouldRefuse is how many calls the candidate would have refused that ran: the
	// enforced policy let them through while the candidate was open or had its probe
	// slots full.
	WouldRefuse int64 `json:"wouldRefuse"`
	// StartTime is when the pod began judging this candidate: the span of every count.
	StartTime *Time `json:"startTime,omitempty"`
	// TimeOpen is how long the candidate was open or half-open since StartTime, up to
	// when the entry was taken.
	TimeOpen *Duration `json:"timeOpen,omitempty"`
	// Enforced is the enforced policy over the same span.
	Enforced *CandidateBaseline `json:"enforced,omitempty"`
}

// CandidateBaseline is what the enforced policy did over a candidate's span.
type CandidateBaseline struct {
	// Opens is how many times the enforced circuit opened.
	Opens int64 `json:"opens"`
	// Refused is how many calls it short-circuited, open or with its probe slots full
	// (not those adaptive throttling rejected).
	Refused int64 `json:"refused"`
	// TimeOpen is how long it was open or half-open.
	TimeOpen *Duration `json:"timeOpen,omitempty"`
}

// MaxCandidateCount bounds each count of a CandidateEntry, as the BreakerReport schema
// does: the operator's sums over 5,000 pods stay below 2^53. A reporter saturates its
// counts here.
const MaxCandidateCount = MaxTrafficCount

// check reports through bad what is wrong with a report entry's candidate, each field
// named by its path in the entry.
func (c *CandidateEntry) check(bad func(field, format string, args ...any)) {
	switch c.State {
	case StateClosed, StateOpen, StateHalfOpen:
	case "":
		bad("candidate.state", "is required: one of %s, %s, %s", StateClosed, StateOpen, StateHalfOpen)
	default:
		bad("candidate.state", "must be one of %s, %s, %s, not %q", StateClosed, StateOpen, StateHalfOpen, c.State)
	}
	if c.Since.IsZero() {
		bad("candidate.since", "is required: when the candidate reached its state, an RFC 3339 time")
	}
	inRange(bad, "candidate.opens", c.Opens, MaxCandidateCount)
	inRange(bad, "candidate.wouldRefuse", c.WouldRefuse, MaxCandidateCount)
	if b := c.Enforced; b != nil {
		inRange(bad, "candidate.enforced.opens", b.Opens, MaxCandidateCount)
		inRange(bad, "candidate.enforced.refused", b.Refused, MaxCandidateCount)
	}
}
