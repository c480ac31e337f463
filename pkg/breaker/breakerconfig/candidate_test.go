package breakerconfig

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// sampleCandidate is a candidate as the operator renders it: every field resolved.
const sampleCandidate = `{
    "openTimeout": "30s",
    "window": "10s",
    "failureRatio": 0.2,
    "minimumThroughput": 10,
    "successThreshold": 2,
    "halfOpenPermittedCalls": 1
  }`

// candidateSample is the design's example document with a candidate.
var candidateSample = strings.Replace(sample, `"scope": "Pod"`, `"scope": "Pod",
  "candidate": `+sampleCandidate, 1)

func TestParseReadsTheCandidate(t *testing.T) {
	c, err := Parse([]byte(candidateSample))
	if err != nil {
		t.Fatal(err)
	}
	want := Candidate{Policy{OpenTimeout: Duration(30 * time.Second), Window: Duration(10 * time.Second), FailureRatio: 0.2,
		MinimumThroughput: 10, SuccessThreshold: 2, HalfOpenPermittedCalls: 1}}
	if c.Candidate == nil || *c.Candidate != want {
		t.Fatalf("candidate %+v, want %+v", c.Candidate, want)
	}
	out, err := Marshal(c)
	if err != nil || string(out) != candidateSample {
		t.Errorf("Marshal(Parse(doc)) =\n%s\n%v\nwant\n%s", out, err, candidateSample)
	}
	if c, err := Parse([]byte(sample)); err != nil || c.Candidate != nil {
		t.Errorf("a document without a candidate: %+v, %v", c.Candidate, err)
	}
}

// A bad candidate refuses the whole document, naming the field under "candidate.", as a
// bad enforced field does: the pod keeps its last good config, candidate included.
func TestParseRefusesABadCandidateNamingTheField(t *testing.T) {
	for _, tc := range []struct{ name, from, to, field string }{
		{"bad duration", `"openTimeout": "30s",
    "window"`, `"openTimeout": "soon",
    "window"`, "candidate.openTimeout"},
		{"missing window", `"window": "10s",
    "failureRatio": 0.2`, `"failureRatio": 0.2`, "candidate.window"},
		{"zero window", `"window": "10s",
    "failureRatio": 0.2`, `"window": "0s",
    "failureRatio": 0.2`, "candidate.window"},
		{"ratio above 1", `"failureRatio": 0.2`, `"failureRatio": 1.2`, "candidate.failureRatio"},
		{"ratio 0", `"failureRatio": 0.2`, `"failureRatio": 0`, "candidate.failureRatio"},
		{"ratio a string", `"failureRatio": 0.2`, `"failureRatio": "a fifth"`, "candidate.failureRatio"},
		{"zero minimum", `"minimumThroughput": 10`, `"minimumThroughput": 0`, "candidate.minimumThroughput"},
		{"zero threshold", `"successThreshold": 2,
    "halfOpen`, `"successThreshold": 0,
    "halfOpen`, "candidate.successThreshold"},
		{"zero probe cap", `"halfOpenPermittedCalls": 1
  }`, `"halfOpenPermittedCalls": 0
  }`, "candidate.halfOpenPermittedCalls"},
		{"negative slowCallDuration", `"halfOpenPermittedCalls": 1
  }`, `"halfOpenPermittedCalls": 1, "slowCallDuration": "-1s"
  }`, "candidate.slowCallDuration"},
		{"slowCallRatio above 1", `"halfOpenPermittedCalls": 1
  }`, `"halfOpenPermittedCalls": 1, "slowCallDuration": "1s", "slowCallRatio": 2
  }`, "candidate.slowCallRatio"},
		{"slowCallRatio negative", `"halfOpenPermittedCalls": 1
  }`, `"halfOpenPermittedCalls": 1, "slowCallRatio": -0.5
  }`, "candidate.slowCallRatio"},
		{"maxOpenTimeout below openTimeout", `"halfOpenPermittedCalls": 1
  }`, `"halfOpenPermittedCalls": 1, "maxOpenTimeout": "10s"
  }`, "candidate.maxOpenTimeout"},
		{"maxOpenTimeout no duration", `"halfOpenPermittedCalls": 1
  }`, `"halfOpenPermittedCalls": 1, "maxOpenTimeout": "later"
  }`, "candidate.maxOpenTimeout"},
		{"candidate not an object", `"candidate": {`, `"candidate": 3, "x": {`, "candidate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := strings.Replace(candidateSample, tc.from, tc.to, 1)
			if doc == candidateSample {
				t.Fatalf("test case did not change the document")
			}
			_, err := Parse([]byte(doc))
			if err == nil {
				t.Fatalf("accepted:\n%s", doc)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("error %q does not name %s", err, tc.field)
			}
		})
	}
}

func validCandidateEntry() *CandidateEntry {
	start := NewTime(time.Date(2026, 11, 29, 20, 0, 0, 0, time.UTC))
	open := Duration(90 * time.Second)
	return &CandidateEntry{
		State: StateOpen, Since: NewTime(time.Date(2026, 11, 29, 21, 55, 51, 123e6, time.UTC)), Opens: 3, WouldRefuse: 420,
		StartTime: &start, TimeOpen: &open, Enforced: &CandidateBaseline{Opens: 0, Refused: 0},
	}
}

// TestCandidateEntryBounds: the schema's bounds of an entry's candidate, just inside and
// just outside, each refusal naming the field by its path.
func TestCandidateEntryBounds(t *testing.T) {
	for _, tc := range []struct {
		name   string
		modify func(*CandidateEntry)
		field  string
	}{
		{"as the reporter writes it", func(*CandidateEntry) {}, ""},
		{"counts at the bound", func(c *CandidateEntry) {
			c.Opens, c.WouldRefuse, c.Enforced.Opens, c.Enforced.Refused = MaxCandidateCount, MaxCandidateCount, MaxCandidateCount, MaxCandidateCount
		}, ""},
		{"no state", func(c *CandidateEntry) { c.State = "" }, "candidate.state"},
		{"an unknown state", func(c *CandidateEntry) { c.State = "Ajar" }, "candidate.state"},
		{"no since", func(c *CandidateEntry) { c.Since = Time{} }, "candidate.since"},
		{"opens negative", func(c *CandidateEntry) { c.Opens = -1 }, "candidate.opens"},
		{"wouldRefuse over the bound", func(c *CandidateEntry) { c.WouldRefuse = MaxCandidateCount + 1 }, "candidate.wouldRefuse"},
		{"enforced opens negative", func(c *CandidateEntry) { c.Enforced.Opens = -1 }, "candidate.enforced.opens"},
		{"enforced refused over the bound", func(c *CandidateEntry) { c.Enforced.Refused = MaxCandidateCount + 1 }, "candidate.enforced.refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := validEntry()
			e.Candidate = validCandidateEntry()
			tc.modify(e.Candidate)
			err := AgentReport{Breakers: []ReportEntry{e}}.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != "breakers[0]."+tc.field {
				t.Fatalf("got %v, want a FieldError naming breakers[0].%s", err, tc.field)
			}
		})
	}
}

// A candidate's field the wire type cannot hold is named by its path inside the
// candidate, as the schema names it.
func TestParseAgentReportNamesTheCandidatesField(t *testing.T) {
	entry := func(candidate string) string {
		return `{"breakers":[{"name":"x","state":"Open","since":"2026-01-01T00:00:00Z","reason":"Tripped","candidate":` + candidate + `}]}`
	}
	for _, tc := range []struct{ body, field string }{
		{entry(`{"state":"Open","since":"soon","opens":1,"wouldRefuse":2}`), "breakers[0].candidate.since"},
		{entry(`{"state":"Open","since":"2026-01-01T00:00:00Z","opens":"one","wouldRefuse":2}`), "breakers[0].candidate.opens"},
		{entry(`{"state":"Open","since":"2026-01-01T00:00:00Z","opens":1,"wouldRefuse":2,"timeOpen":"long"}`), "breakers[0].candidate.timeOpen"},
		{entry(`"Open"`), "breakers[0].candidate"},
	} {
		_, err := ParseAgentReport([]byte(tc.body))
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%s: %v, want it to name %s", tc.body, err, tc.field)
		}
	}
	good, _ := json.Marshal(AgentReport{Breakers: []ReportEntry{func() ReportEntry { e := validEntry(); e.Candidate = validCandidateEntry(); return e }()}})
	r, err := ParseAgentReport(good)
	if err != nil || r.Breakers[0].Candidate == nil || r.Breakers[0].Candidate.WouldRefuse != 420 || *r.Breakers[0].Candidate.TimeOpen != Duration(90*time.Second) {
		t.Errorf("a valid candidate: %+v, %v", r.Breakers[0].Candidate, err)
	}
}
