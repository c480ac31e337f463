package breakerconfig

import (
	"strings"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
)

const sample = `{
  "name": "payments-api",
  "generation": 3,
  "openTimeout": "30s",
  "window": "10s",
  "failureRatio": 0.5,
  "minimumThroughput": 20,
  "successThreshold": 2,
  "halfOpenPermittedCalls": 1,
  "mode": "Enforce",
  "scope": "Pod"
}`

func TestParseTheDesignExample(t *testing.T) {
	c, err := Parse([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Policy()
	if err != nil {
		t.Fatal(err)
	}
	if p != breaker.DefaultPolicy() {
		t.Errorf("policy %+v, want the default %+v", p, breaker.DefaultPolicy())
	}
	if c.Name != "payments-api" || c.Generation != 3 || c.Scope != ScopePod || c.Verdict != nil {
		t.Errorf("parsed %+v", c)
	}
	out, err := Marshal(c)
	if err != nil || string(out) != sample {
		t.Errorf("Marshal(Parse(sample)) =\n%s\n%v", out, err)
	}
}

func TestParseIgnoresUnknownFieldsAndReadsTheVerdict(t *testing.T) {
	doc := strings.Replace(sample, `"scope": "Pod"`, `"scope": "Fleet", "future": {"x": 1},
  "verdict": {"state": "Open", "since": "2026-11-29T10:00:00Z"}`, 1)
	c, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	want := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	if c.Verdict == nil || c.Verdict.State != StateOpen || !c.Verdict.Since.Equal(want) {
		t.Errorf("verdict %+v", c.Verdict)
	}
}

func TestParseRefusesNamingTheField(t *testing.T) {
	for _, tc := range []struct{ name, from, to, field string }{
		{"bad duration", `"openTimeout": "30s"`, `"openTimeout": "soon"`, "openTimeout"},
		{"duration as number", `"window": "10s"`, `"window": 10`, "window"},
		{"missing window", `"window": "10s",`, ``, "window"},
		{"zero window", `"window": "10s"`, `"window": "0s"`, "indow"},
		{"ratio above 1", `"failureRatio": 0.5`, `"failureRatio": 1.5`, "atio"},
		{"ratio as string", `"failureRatio": 0.5`, `"failureRatio": "half"`, "failureRatio"},
		{"zero minimum", `"minimumThroughput": 20`, `"minimumThroughput": 0`, "inimum"},
		{"zero threshold", `"successThreshold": 2`, `"successThreshold": 0`, "hreshold"},
		{"zero probe cap", `"halfOpenPermittedCalls": 1`, `"halfOpenPermittedCalls": 0`, "alfOpen"},
		{"unknown mode", `"mode": "Enforce"`, `"mode": "Sometimes"`, "ode"},
		{"unknown scope", `"scope": "Pod"`, `"scope": "Galaxy"`, "scope"},
		{"no name", `"name": "payments-api"`, `"name": ""`, "name"},
		{"bad verdict", `"scope": "Pod"`, `"scope": "Fleet", "verdict": {"state": "Ajar", "since": "2026-11-29T10:00:00Z"}`, "verdict.state"},
		{"verdict without time", `"scope": "Pod"`, `"scope": "Fleet", "verdict": {"state": "Open"}`, "verdict.since"},
		{"truncated", `"scope": "Pod"
}`, `"scope": "Pod"`, "parse"},
		{"trailing data", `"scope": "Pod"
}`, `"scope": "Pod"} {}`, "trailing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := strings.Replace(sample, tc.from, tc.to, 1)
			if doc == sample {
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

// Whatever the bytes, Parse either refuses them or returns a config whose
// policy the breaker accepts and which survives a round trip.
func FuzzParse(f *testing.F) {
	f.Add([]byte(sample))
	f.Add([]byte(`{"name":"x","openTimeout":"1ns","window":"1h","failureRatio":1,"minimumThroughput":1,"successThreshold":1,"halfOpenPermittedCalls":1,"mode":"","scope":""}`))
	f.Add([]byte(`{"name":"x","verdict":{"state":"Open","since":"2026-01-01T00:00:00Z"}}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			return
		}
		p, err := c.Policy()
		if err != nil {
			t.Fatalf("Parse accepted a config whose policy is invalid: %v", err)
		}
		if _, err := breaker.New(c.Name, p); err != nil {
			t.Fatalf("breaker.New refused a parsed policy: %v", err)
		}
		out, err := Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Parse(out); err != nil {
			t.Fatalf("round trip refused: %v\n%s", err, out)
		}
	})
}
