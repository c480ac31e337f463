package breakerconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Validation of report entries: the bounds the BreakerReport schema (and a
// NodeBreakerReport's line, which holds the same entries) puts on each field, checked in
// Go, so that the node agent refuses one pod's bad entry with a 400 naming the field
// instead of carrying it into a node's object, which the API server would then refuse
// whole, and every other pod's line with it. A test of internal/nodeagent sends each
// invalid entry both to the agent and, as a BreakerReport, to the API server, and checks
// that they agree.

// MaxExactCount bounds an entry's calls: 2^53−1, the largest integer a JSON reader that
// holds numbers as doubles reads exactly. The schema spells it again.
const MaxExactCount = 1<<53 - 1

// maxNameLength bounds a breaker's name and a Group's key names in worst, in characters,
// as the schema does: the length of a Kubernetes object name.
const maxNameLength = 253

// FieldError is what is wrong with one field of a report: Field is its path in the body
// (breakers[2].failureRatePercent), Detail what is wrong with its value.
type FieldError struct {
	Field  string
	Detail string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Detail }

// ParseAgentReport reads the body of PUT AgentReportPath and validates it. What is wrong
// is named by its path in the body, whether it is a value outside the schema's bounds or
// one the wire type cannot hold (a string for a count, a time that does not parse):
// "breakers[2].since: ...". Unknown fields are ignored, as readers of the rendered config
// ignore them.
func ParseAgentReport(data []byte) (AgentReport, error) {
	var raw struct {
		Breakers json.RawMessage `json:"breakers"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return AgentReport{}, &FieldError{"body", "not a JSON object with breakers: " + err.Error()}
	}
	var items []json.RawMessage
	if len(raw.Breakers) > 0 && !bytes.Equal(raw.Breakers, []byte("null")) {
		if err := json.Unmarshal(raw.Breakers, &items); err != nil {
			return AgentReport{}, &FieldError{"breakers", "must be a list of entries"}
		}
	}
	r := AgentReport{Breakers: make([]ReportEntry, len(items))}
	var errs []error
	for i, item := range items {
		if err := json.Unmarshal(item, &r.Breakers[i]); err != nil {
			field, detail := badField(item, err, func() any { return &ReportEntry{} })
			at := fmt.Sprintf("breakers[%d]", i)
			if field != "" {
				at += "." + field
			}
			errs = append(errs, &FieldError{at, detail})
		}
	}
	if len(errs) > 0 {
		return AgentReport{}, errors.Join(errs...)
	}
	return r, r.Validate()
}

// badField finds which field of an entry its decoding failed on, err being that failure:
// encoding/json names the field of a mistyped value, but not the field whose own reader
// (a time, a duration) refused it, so each field is then read alone, into a value zero
// makes (a ReportEntry, or a CandidateEntry for the fields inside an entry's candidate).
func badField(item json.RawMessage, err error, zero func() any) (field, detail string) {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) && typeErr.Field != "" {
		return typeErr.Field, fmt.Sprintf("must be a JSON %s, not %s", jsonKind(typeErr.Type.Kind().String()), typeErr.Value)
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(item, &fields) != nil {
		return "", "must be an object: " + err.Error()
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		one, _ := json.Marshal(map[string]json.RawMessage{k: fields[k]})
		if ferr := json.Unmarshal(one, zero()); ferr != nil {
			if k == "candidate" {
				// An object of its own, with times and durations of its own: named by
				// the path inside it, as the schema names them.
				newCandidate := func() any { return &CandidateEntry{} }
				if sub, detail := badField(fields[k], json.Unmarshal(fields[k], newCandidate()), newCandidate); sub != "" {
					return k + "." + sub, detail
				}
			}
			return k, ferr.Error()
		}
	}
	return "", err.Error()
}

// jsonKind is how a message names the JSON type a Go kind is read from.
func jsonKind(kind string) string {
	switch {
	case strings.HasPrefix(kind, "int"), strings.HasPrefix(kind, "uint"):
		return "integer"
	case strings.HasPrefix(kind, "float"):
		return "number"
	case kind == "slice", kind == "array":
		return "list"
	case kind == "struct", kind == "map", kind == "ptr":
		return "object"
	}
	return kind
}

// Validate checks an AgentReport against the schema's bounds: at most MaxAgentEntries
// entries, each valid, one per breaker name. It returns nil or every FieldError found,
// joined, each naming its field by its path in the body.
func (r AgentReport) Validate() error {
	var errs []error
	if n := len(r.Breakers); n > MaxAgentEntries {
		errs = append(errs, &FieldError{"breakers", fmt.Sprintf("must hold at most %d entries (one pod's line of a NodeBreakerReport), has %d", MaxAgentEntries, n)})
	}
	seen := make(map[string]int, len(r.Breakers))
	for i, e := range r.Breakers {
		at := fmt.Sprintf("breakers[%d]", i)
		errs = append(errs, e.check(at)...)
		if j, dup := seen[e.Name]; dup && e.Name != "" {
			errs = append(errs, &FieldError{at + ".name", fmt.Sprintf("duplicate entry %q: breakers[%d] has the same name, and a report holds one entry per breaker", e.Name, j)})
			continue
		}
		seen[e.Name] = i
	}
	return errors.Join(errs...)
}

// Validate checks one entry against the schema's bounds. It returns nil or every
// FieldError found, joined, each naming its field by its JSON name.
func (e ReportEntry) Validate() error {
	return errors.Join(e.check("")...)
}

// check returns what is wrong with e, each field named under the path at ("" for e
// itself).
func (e ReportEntry) check(at string) []error {
	var errs []error
	bad := func(field, format string, args ...any) {
		path := field
		if at != "" {
			path = at + "." + field
		}
		errs = append(errs, &FieldError{path, fmt.Sprintf(format, args...)})
	}
	switch n := utf8.RuneCountInString(e.Name); {
	case n == 0:
		bad("name", "is required: the breaker's name")
	case n > maxNameLength:
		bad("name", "must be at most %d characters, has %d", maxNameLength, n)
	}
	switch e.State {
	case StateClosed, StateOpen, StateHalfOpen:
	case "":
		bad("state", "is required: one of %s, %s, %s", StateClosed, StateOpen, StateHalfOpen)
	default:
		bad("state", "must be one of %s, %s, %s, not %q", StateClosed, StateOpen, StateHalfOpen, e.State)
	}
	if e.Since.IsZero() {
		bad("since", "is required: when the breaker reached its state, an RFC 3339 time")
	}
	switch e.Reason {
	case ReasonStarted, ReasonTripped, ReasonManual, ReasonProbeFailed, ReasonProbesSucceeded,
		ReasonTimedOut, ReasonAdopted, ReasonForced:
	case "":
		bad("reason", "is required: one of %s", strings.Join(reasons, ", "))
	default:
		bad("reason", "must be one of %s, not %q", strings.Join(reasons, ", "), e.Reason)
	}
	if e.Calls != nil {
		inRange(bad, "calls", *e.Calls, MaxExactCount)
	}
	if e.FailureRatePercent != nil {
		inRange(bad, "failureRatePercent", int64(*e.FailureRatePercent), 100)
	}
	if e.SlowCallRatePercent != nil {
		inRange(bad, "slowCallRatePercent", int64(*e.SlowCallRatePercent), 100)
	}
	switch e.Trigger {
	case "", TriggerFailureRate, TriggerSlowCallRate, TriggerFailedProbe, TriggerSlowProbe:
	default:
		bad("trigger", "must be one of %s, %s, %s, %s, not %q", TriggerFailureRate, TriggerSlowCallRate, TriggerFailedProbe, TriggerSlowProbe, e.Trigger)
	}
	if e.ConsecutiveOpens < 0 {
		bad("consecutiveOpens", "must be at least 0, is %d", e.ConsecutiveOpens)
	}
	if k := e.Keys; k != nil {
		inRange(bad, "keys.keys", int64(k.Keys), MaxKeyCount)
		inRange(bad, "keys.open", int64(k.Open), MaxKeyCount)
		inRange(bad, "keys.halfOpen", int64(k.HalfOpen), MaxKeyCount)
		if n := len(k.Worst); n > MaxWorstKeys {
			bad("keys.worst", "must hold at most %d keys, has %d", MaxWorstKeys, n)
		}
		for i, w := range k.Worst {
			if n := utf8.RuneCountInString(w); n > maxNameLength {
				bad(fmt.Sprintf("keys.worst[%d]", i), "must be at most %d characters, has %d", maxNameLength, n)
			}
		}
	}
	for _, c := range []struct {
		field string
		n     *int64
	}{{"requests", e.Requests}, {"accepts", e.Accepts}, {"retries", e.Retries}, {"throttled", e.Throttled}} {
		if c.n != nil {
			inRange(bad, c.field, *c.n, MaxTrafficCount)
		}
	}
	// What a window can hold (docs/design.md §5.17): its accepted, retried and
	// throttled calls are among its requests. A count written without requests is
	// judged against none, as the schema's rules judge it.
	var requests int64
	if e.Requests != nil {
		requests = *e.Requests
	}
	for _, c := range []struct {
		field string
		n     *int64
	}{{"accepts", e.Accepts}, {"retries", e.Retries}, {"throttled", e.Throttled}} {
		if c.n != nil && *c.n > requests {
			bad(c.field, "must be at most requests (%d): a window's %s are among its requests, has %d", requests, c.field, *c.n)
		}
	}
	if e.InFlightPeak != nil {
		inRange(bad, "inFlightPeak", *e.InFlightPeak, MaxInFlight)
	}
	if e.Limited != nil {
		inRange(bad, "limited", *e.Limited, MaxTrafficCount)
	}
	if b := e.Baseline; b != nil && (*b < 0 || time.Duration(*b) > MaxBaseline) {
		bad("baseline", "must be between 0s and %s, is %s", MaxBaseline, time.Duration(*b))
	}
	if c := e.Candidate; c != nil {
		c.check(bad)
	}
	if e.ConfigGeneration < 0 {
		bad("configGeneration", "must be at least 0, is %d", e.ConfigGeneration)
	}
	if n := utf8.RuneCountInString(e.ConfigError); n > MaxConfigErrorSize {
		bad("configError", "must be at most %d characters, has %d", MaxConfigErrorSize, n)
	}
	return errs
}

// inRange reports through bad a count outside [0, most].
func inRange(bad func(field, format string, args ...any), field string, n, most int64) {
	if n < 0 || n > most {
		bad(field, "must be between 0 and %d, is %d", most, n)
	}
}

// reasons lists every Reason value, for messages.
var reasons = []string{ReasonStarted, ReasonTripped, ReasonManual, ReasonProbeFailed, ReasonProbesSucceeded,
	ReasonTimedOut, ReasonAdopted, ReasonForced}
