package breakerconfig

// Candidate is a policy the pods judge in shadow beside the enforced one (docs/design.md
// §11): the document's policy fields, under the same names and spellings, each resolved
// by the operator (a field the CircuitBreaker's spec.candidate leaves unset is rendered
// with the spec's value), so a reader needs nothing else to judge it. The shadow never
// refuses a call, so the candidate has no mode; and it shares no verdict, so no scope.
// A bad field refuses the whole document, named under "candidate.".
type Candidate struct {
	Policy
}

// wireCandidate is a Candidate as Parse reads it, without its durations' decoding.
type wireCandidate Candidate

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
