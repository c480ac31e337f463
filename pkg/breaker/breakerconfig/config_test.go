package breakerconfig

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
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
		{"bad slowCallDuration", `"scope": "Pod"`, `"scope": "Pod", "slowCallDuration": "slow"`, "slowCallDuration"},
		{"slowCallDuration as number", `"scope": "Pod"`, `"scope": "Pod", "slowCallDuration": 2`, "slowCallDuration"},
		{"negative slowCallDuration", `"scope": "Pod"`, `"scope": "Pod", "slowCallDuration": "-1s"`, "slowCallDuration"},
		{"slowCallRatio above 1", `"scope": "Pod"`, `"scope": "Pod", "slowCallDuration": "1s", "slowCallRatio": 1.5`, "slowCallRatio"},
		{"bad maxOpenTimeout", `"scope": "Pod"`, `"scope": "Pod", "maxOpenTimeout": "1 hour"`, "maxOpenTimeout"},
		{"maxOpenTimeout below openTimeout", `"scope": "Pod"`, `"scope": "Pod", "maxOpenTimeout": "10s"`, "maxOpenTimeout"},
		{"bad verdict openTimeout", `"scope": "Pod"`, `"scope": "Fleet", "verdict": {"state": "Open", "since": "2026-11-29T10:00:00Z", "openTimeout": "soon"}`, "verdict.openTimeout"},
		{"verdict openTimeout as number", `"scope": "Pod"`, `"scope": "Fleet", "verdict": {"state": "Open", "since": "2026-11-29T10:00:00Z", "openTimeout": 5}`, "verdict.openTimeout"},
		{"negative verdict openTimeout", `"scope": "Pod"`, `"scope": "Fleet", "verdict": {"state": "Open", "since": "2026-11-29T10:00:00Z", "openTimeout": "-5s"}`, "verdict.openTimeout"},
		{"negative consecutiveOpens", `"scope": "Pod"`, `"scope": "Fleet", "verdict": {"state": "Open", "since": "2026-11-29T10:00:00Z", "consecutiveOpens": -1}`, "verdict.consecutiveOpens"},
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

// Whatever the bytes, Parse either refuses them or returns a config that survives a round
// trip. That the breaker accepts every parsed policy is pkg/breaker/kube's FuzzPolicyOf.
func FuzzParse(f *testing.F) {
	f.Add([]byte(sample))
	f.Add([]byte(`{"name":"x","openTimeout":"1ns","window":"1h","failureRatio":1,"minimumThroughput":1,"successThreshold":1,"halfOpenPermittedCalls":1,"mode":"","scope":""}`))
	f.Add([]byte(`{"name":"x","verdict":{"state":"Open","since":"2026-01-01T00:00:00Z"}}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(fleetSample))
	f.Add([]byte(strings.Replace(sample, `"scope": "Pod"`, `"scope": "Fleet", "slowCallDuration": "1.5s", "slowCallRatio": 0.8, "maxOpenTimeout": "5m",
  "verdict": {"state": "Open", "since": "2026-11-29T10:00:00.123Z", "consecutiveOpens": 3, "openTimeout": "2m0s"}`, 1)))
	f.Add([]byte(strings.Replace(sample, `"scope": "Pod"`, `"scope": "Pod", "slowCallRatio": 0.3, "maxOpenTimeout": "30s"`, 1)))
	f.Add([]byte(`{"name":"x","slowCallDuration":"1ms","maxOpenTimeout":"-1s","verdict":{"state":"Closed","since":"2026-01-01T00:00:00Z","openTimeout":"1h"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			return
		}
		out, err := Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		back, err := Parse(out)
		if err != nil {
			t.Fatalf("round trip refused: %v\n%s", err, out)
		}
		if !sameConfig(back, c) {
			t.Fatalf("round trip changed the config:\n%+v\n%+v\n%s", c, back, out)
		}
	})
}

// sameConfig compares configs, their verdicts' times as instants: a parsed time keeps the
// document's zone, which Marshal writes back as the same instant.
func sameConfig(a, b Config) bool {
	if !samePointee(a.RetryBudget, b.RetryBudget) || !samePointee(a.Throttle, b.Throttle) || !samePointee(a.Fleet, b.Fleet) {
		return false
	}
	a.RetryBudget, a.Throttle, a.Fleet, b.RetryBudget, b.Throttle, b.Fleet = nil, nil, nil, nil, nil, nil
	va, vb := a.Verdict, b.Verdict
	a.Verdict, b.Verdict = nil, nil
	if a != b || (va == nil) != (vb == nil) {
		return false
	}
	if va == nil {
		return true
	}
	x, y := *va, *vb
	x.Since, y.Since = time.Time{}, time.Time{}
	return x == y && va.Since.Equal(vb.Since)
}

// samePointee reports whether a and b are both nil or point to equal values.
func samePointee[T comparable](a, b *T) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}

// Whatever string a duration field holds, Parse reads it as time.ParseDuration does, or
// refuses the document with an error that names the field.
func FuzzParseDurationFields(f *testing.F) {
	for _, s := range []string{"1s", "1.5s", "soon", "", "-1s", "1h2m3.004s", "9223372036854775807ns", "1e3s", "1µs", "0"} {
		f.Add(uint8(0), s)
		f.Add(uint8(2), s)
		f.Add(uint8(4), s)
	}
	fields := []string{"openTimeout", "window", "slowCallDuration", "maxOpenTimeout", "verdict.openTimeout"}
	f.Fuzz(func(t *testing.T, which uint8, value string) {
		field := fields[int(which)%len(fields)]
		quoted, err := json.Marshal(value)
		if err != nil {
			t.Skip("not a JSON string")
		}
		doc := map[string]json.RawMessage{}
		if err := json.Unmarshal([]byte(sample), &doc); err != nil {
			t.Fatal(err)
		}
		if field == "verdict.openTimeout" {
			doc["scope"] = json.RawMessage(`"Fleet"`)
			doc["verdict"] = json.RawMessage(`{"state":"Open","since":"2026-11-29T10:00:00Z","openTimeout":` + string(quoted) + `}`)
		} else {
			doc[field] = quoted
		}
		data, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		c, err := Parse(data)
		d, parseErr := time.ParseDuration(value)
		switch {
		case parseErr != nil && err == nil:
			t.Fatalf("%s %q is no duration (%v), but Parse accepted it", field, value, parseErr)
		case err != nil && !strings.Contains(err.Error(), field):
			t.Fatalf("%s %q refused with an error that does not name it: %v", field, value, err)
		case err == nil && field == "verdict.openTimeout" && time.Duration(c.Verdict.OpenTimeout) != d:
			t.Fatalf("%s %q read as %s", field, value, time.Duration(c.Verdict.OpenTimeout))
		}
	})
}
