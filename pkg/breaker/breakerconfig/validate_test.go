package breakerconfig

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func validEntry() ReportEntry {
	calls, rate := int64(40), int32(60)
	return ReportEntry{
		Name: "payments-api", State: StateOpen, Since: NewTime(time.Date(2026, 11, 29, 21, 55, 51, 123e6, time.UTC)),
		Reason: ReasonTripped, Calls: &calls, FailureRatePercent: &rate, Trigger: TriggerFailureRate,
		ConsecutiveOpens: 1, ConfigGeneration: 3,
	}
}

func i64(n int64) *int64 { return &n }
func i32(n int32) *int32 { return &n }

// TestEntryBounds: every bound of the schema, just inside (accepted) and just outside
// (refused, naming the field).
func TestEntryBounds(t *testing.T) {
	for _, tc := range []struct {
		name   string
		modify func(*ReportEntry)
		field  string // "" for an entry that must be accepted
	}{
		{"as the reporter writes it", func(*ReportEntry) {}, ""},
		{"name at 253 characters", func(e *ReportEntry) { e.Name = strings.Repeat("é", 253) }, ""},
		{"name at 254 characters", func(e *ReportEntry) { e.Name = strings.Repeat("a", 254) }, "name"},
		{"no name", func(e *ReportEntry) { e.Name = "" }, "name"},
		{"no state", func(e *ReportEntry) { e.State = "" }, "state"},
		{"state in lower case", func(e *ReportEntry) { e.State = "open" }, "state"},
		{"no since", func(e *ReportEntry) { e.Since = Time{} }, "since"},
		{"no reason", func(e *ReportEntry) { e.Reason = "" }, "reason"},
		{"an unknown reason", func(e *ReportEntry) { e.Reason = "Because" }, "reason"},
		{"calls at 2^53-1", func(e *ReportEntry) { e.Calls = i64(MaxExactCount) }, ""},
		{"calls at 2^53", func(e *ReportEntry) { e.Calls = i64(MaxExactCount + 1) }, "calls"},
		{"calls negative", func(e *ReportEntry) { e.Calls = i64(-1) }, "calls"},
		{"failure rate 100", func(e *ReportEntry) { e.FailureRatePercent = i32(100) }, ""},
		{"failure rate 101", func(e *ReportEntry) { e.FailureRatePercent = i32(101) }, "failureRatePercent"},
		{"failure rate negative", func(e *ReportEntry) { e.FailureRatePercent = i32(-1) }, "failureRatePercent"},
		{"slow-call rate 101", func(e *ReportEntry) { e.SlowCallRatePercent = i32(101) }, "slowCallRatePercent"},
		{"an unknown trigger", func(e *ReportEntry) { e.Trigger = "Gremlins" }, "trigger"},
		{"consecutive opens negative", func(e *ReportEntry) { e.ConsecutiveOpens = -1 }, "consecutiveOpens"},
		{"keys at the bound", func(e *ReportEntry) { e.Keys = &KeySummary{Keys: MaxKeyCount, Open: MaxKeyCount, HalfOpen: 0} }, ""},
		{"keys over the bound", func(e *ReportEntry) { e.Keys = &KeySummary{Keys: MaxKeyCount + 1} }, "keys.keys"},
		{"open keys negative", func(e *ReportEntry) { e.Keys = &KeySummary{Keys: 1, Open: -1} }, "keys.open"},
		{"half-open keys over the bound", func(e *ReportEntry) { e.Keys = &KeySummary{HalfOpen: MaxKeyCount + 1} }, "keys.halfOpen"},
		{"six worst keys", func(e *ReportEntry) { e.Keys = &KeySummary{Keys: 6, Worst: []string{"a", "b", "c", "d", "e", "f"}} }, "keys.worst"},
		{"a worst key of 254 characters", func(e *ReportEntry) { e.Keys = &KeySummary{Keys: 1, Worst: []string{strings.Repeat("k", 254)}} }, "keys.worst[0]"},
		{"traffic at the bound", func(e *ReportEntry) {
			e.Requests, e.Accepts, e.Retries, e.Throttled = i64(MaxTrafficCount), i64(MaxTrafficCount), i64(MaxTrafficCount), i64(MaxTrafficCount)
		}, ""},
		{"requests over the bound", func(e *ReportEntry) { e.Requests = i64(MaxTrafficCount + 1) }, "requests"},
		{"throttled negative", func(e *ReportEntry) { e.Requests, e.Throttled = i64(5), i64(-1) }, "throttled"},
		{"accepts over requests", func(e *ReportEntry) { e.Requests, e.Accepts = i64(10), i64(11) }, "accepts"},
		{"accepts without requests", func(e *ReportEntry) { e.Accepts = i64(1) }, "accepts"},
		{"retries over requests", func(e *ReportEntry) { e.Requests, e.Retries = i64(10), i64(11) }, "retries"},
		{"throttled over requests", func(e *ReportEntry) { e.Requests, e.Throttled = i64(10), i64(11) }, "throttled"},
		{"config generation negative", func(e *ReportEntry) { e.ConfigGeneration = -1 }, "configGeneration"},
		{"configError at 1024 characters", func(e *ReportEntry) { e.ConfigError = strings.Repeat("é", 1024) }, ""},
		{"configError at 1025 characters", func(e *ReportEntry) { e.ConfigError = strings.Repeat("e", 1025) }, "configError"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := validEntry()
			tc.modify(&e)
			first := validEntry()
			first.Name = "inventory"
			err := AgentReport{Breakers: []ReportEntry{first, e}}.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != "breakers[1]."+tc.field {
				t.Fatalf("got %v, want a FieldError naming breakers[1].%s", err, tc.field)
			}
			if ferr := e.Validate(); ferr == nil || !strings.HasPrefix(ferr.Error(), tc.field+": ") {
				t.Errorf("the entry alone: %v, want it to name %s", ferr, tc.field)
			}
		})
	}
}

func TestReportBounds(t *testing.T) {
	many := make([]ReportEntry, MaxAgentEntries+1)
	for i := range many {
		many[i] = validEntry()
		many[i].Name = "b" + strings.Repeat("x", i)
	}
	if err := (AgentReport{Breakers: many[:MaxAgentEntries]}).Validate(); err != nil {
		t.Errorf("%d entries refused: %v", MaxAgentEntries, err)
	}
	if err := (AgentReport{Breakers: many}).Validate(); err == nil || !strings.Contains(err.Error(), "breakers: must hold at most 100") {
		t.Errorf("%d entries: %v, want refused", len(many), err)
	}
	dup := AgentReport{Breakers: []ReportEntry{validEntry(), validEntry()}}
	if err := dup.Validate(); err == nil || !strings.Contains(err.Error(), "breakers[1].name: duplicate entry") {
		t.Errorf("two entries of one name: %v, want refused", err)
	}
	if err := (AgentReport{}).Validate(); err != nil {
		t.Errorf("an empty report refused: %v", err)
	}
}

// FuzzAgentReport: whatever a pod sends, a report that passes Validate is written and
// read back the same and passes again, so the agent never carries into a node's object
// an entry the check did not see.
func FuzzAgentReport(f *testing.F) {
	good, _ := json.Marshal(AgentReport{Breakers: []ReportEntry{validEntry()}})
	f.Add(good)
	f.Add([]byte(`{"breakers":[{"name":"x","state":"Open","since":"2026-01-01T00:00:00Z","reason":"Tripped","requests":5,"accepts":6}]}`))
	f.Add([]byte(`{"breakers":[{"name":"x","state":"Closed","since":"2026-01-01T00:00:00.5+02:00","reason":"Started","keys":{"keys":1,"open":0,"halfOpen":0,"worst":["a"]}}]}`))
	withCandidate := validEntry()
	withCandidate.Candidate = validCandidateEntry()
	good, _ = json.Marshal(AgentReport{Breakers: []ReportEntry{withCandidate}})
	f.Add(good)
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := ParseAgentReport(body)
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field == "" || fe.Detail == "" {
				t.Fatalf("a refusal names no field: %v", err)
			}
			return
		}
		out, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("a valid report does not marshal: %v", err)
		}
		var back AgentReport
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("a valid report does not read back: %v\n%s", err, out)
		}
		if err := back.Validate(); err != nil {
			t.Fatalf("a valid report is invalid once written: %v\n%s", err, out)
		}
		again, _ := json.Marshal(back)
		if !reflect.DeepEqual(out, again) {
			t.Fatalf("written twice, two spellings:\n%s\n%s", out, again)
		}
	})
}

// TestParseAgentReportNamesTheField: a value the wire type cannot hold is named by its
// path, as a value out of bounds is.
func TestParseAgentReportNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		body, field string
	}{
		{`{"breakers":[{"name":"x","state":"Open","since":"yesterday","reason":"Tripped"}]}`, "breakers[0].since"},
		{`{"breakers":[{"name":"x","state":"Open","since":"2026-01-01T00:00:00Z","reason":"Tripped","calls":"many"}]}`, "breakers[0].calls"},
		{`{"breakers":[{"name":"x","state":"Open","since":"2026-01-01T00:00:00Z","reason":"Tripped","keys":{"keys":1,"open":"one","halfOpen":0}}]}`, "breakers[0].keys.open"},
		{`{"breakers":[{"name":"x","state":"Open","since":"2026-01-01T00:00:00Z","reason":"Tripped","openTimeout":"soon"}]}`, "breakers[0].openTimeout"},
		{`{"breakers":[{"name":"x","state":"Open","since":"2026-01-01T00:00:00Z","reason":"Tripped","failureRatePercent":101}]}`, "breakers[0].failureRatePercent"},
		{`{"breakers":["x"]}`, "breakers[0]"},
		{`{"breakers":{"name":"x"}}`, "breakers"},
		{`[]`, "body"},
		{`{"breakers":`, "body"},
	} {
		_, err := ParseAgentReport([]byte(tc.body))
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%s: %v, want it to name %s", tc.body, err, tc.field)
		}
	}
	r, err := ParseAgentReport([]byte(`{"breakers":[{"name":"x","state":"Open","since":"2026-01-01T00:00:00Z","reason":"Tripped","future":"ignored"}]}`))
	if err != nil || len(r.Breakers) != 1 {
		t.Errorf("a valid report with an unknown field: %+v, %v", r, err)
	}
	if r, err := ParseAgentReport([]byte(`{}`)); err != nil || len(r.Breakers) != 0 {
		t.Errorf("an empty report: %+v, %v", r, err)
	}
}
