package breakerconfig

import (
	"math"
	"strings"
	"testing"
)

// The fleet policies and counts of docs/design.md §4, as the operator renders them.
const fleetSample = `{
  "name": "payments-api",
  "generation": 3,
  "openTimeout": "30s",
  "window": "10s",
  "failureRatio": 0.5,
  "minimumThroughput": 20,
  "successThreshold": 2,
  "halfOpenPermittedCalls": 1,
  "mode": "Enforce",
  "scope": "Pod",
  "retryBudget": {
    "percent": 20,
    "minPerSecond": 10
  },
  "throttle": {
    "k": 1.5
  },
  "fleet": {
    "pods": 200,
    "requests": 12345,
    "accepts": 6000
  }
}`

func TestParseTheFleetPolicies(t *testing.T) {
	c, err := Parse([]byte(fleetSample))
	if err != nil {
		t.Fatal(err)
	}
	if c.RetryBudget == nil || *c.RetryBudget != (RetryBudget{Percent: 20, MinPerSecond: 10}) ||
		c.Throttle == nil || c.Throttle.K != 1.5 || c.Fleet == nil || *c.Fleet != (Fleet{Pods: 200, Requests: 12345, Accepts: 6000}) {
		t.Fatalf("parsed %+v %+v %+v", c.RetryBudget, c.Throttle, c.Fleet)
	}
	// Without either policy, neither is read.
	plain, err := Parse([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	if plain.RetryBudget != nil || plain.Throttle != nil || plain.Fleet != nil {
		t.Errorf("a plain document has fleet policies: %+v", plain)
	}
}

// A bad value is refused whole, naming the field; the reader keeps its last good config.
func TestParseRefusesBadFleetPolicies(t *testing.T) {
	for _, tc := range []struct{ name, from, to, field string }{
		{"negative percent", `"percent": 20`, `"percent": -5`, "retryBudget.percent"},
		{"percent above 100", `"percent": 20`, `"percent": 101`, "retryBudget.percent"},
		{"negative floor", `"minPerSecond": 10`, `"minPerSecond": -1`, "retryBudget.minPerSecond"},
		{"percent as string", `"percent": 20`, `"percent": "20%"`, "retryBudget.percent"},
		{"k below 1", `"k": 1.5`, `"k": 0.5`, "throttle.k"},
		{"k zero", `"k": 1.5`, `"k": 0`, "throttle.k"},
		{"k as string", `"k": 1.5`, `"k": "2"`, "throttle.k"},
		{"negative pods", `"pods": 200`, `"pods": -1`, "fleet.pods"},
		{"negative requests", `"requests": 12345`, `"requests": -3`, "fleet.requests"},
		{"negative accepts", `"accepts": 6000`, `"accepts": -3`, "fleet.accepts"},
		{"requests as float", `"requests": 12345`, `"requests": 1.5`, "fleet.requests"},
		{"fleet as list", `"fleet": {
    "pods": 200,
    "requests": 12345,
    "accepts": 6000
  }`, `"fleet": [200]`, "fleet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := strings.Replace(fleetSample, tc.from, tc.to, 1)
			if doc == fleetSample {
				t.Fatal("test case did not change the document")
			}
			if _, err := Parse([]byte(doc)); err == nil {
				t.Fatalf("accepted:\n%s", doc)
			} else if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("error %q does not name %s", err, tc.field)
			}
		})
	}
}

func TestValidateRefusesNaNK(t *testing.T) {
	c, err := Parse([]byte(fleetSample))
	if err != nil {
		t.Fatal(err)
	}
	c.Throttle.K = math.NaN()
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "throttle.k") {
		t.Errorf("k NaN: %v", err)
	}
}
