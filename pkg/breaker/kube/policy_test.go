package kube

import (
	"strings"
	"testing"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// defaultDocument is the document that publishes the library's default policy, as the
// operator renders it for an empty CircuitBreaker spec.
var defaultDocument = func() string {
	doc, err := breakerconfig.Marshal(ConfigOf("payments-api", 3, breaker.DefaultPolicy(), breakerconfig.ScopePod))
	if err != nil {
		panic(err)
	}
	return string(doc)
}()

func TestPolicyOfTheDefaultDocument(t *testing.T) {
	c, err := breakerconfig.Parse([]byte(defaultDocument))
	if err != nil {
		t.Fatal(err)
	}
	p, err := PolicyOf(c)
	if err != nil {
		t.Fatal(err)
	}
	if p != breaker.DefaultPolicy() {
		t.Errorf("policy %+v, want the default %+v", p, breaker.DefaultPolicy())
	}
}

// What ConfigOf publishes reads back as the same policy, the fleet policies included, and
// the policy read shares nothing with the document it came from.
func TestPolicyOfTheFleetPolicies(t *testing.T) {
	p := breaker.DefaultPolicy()
	p.RetryBudget = &breaker.RetryBudget{Percent: 20, MinPerSecond: 10}
	p.Throttle = &breaker.Throttle{K: 1.5}
	doc, err := breakerconfig.Marshal(ConfigOf("payments-api", 3, p, breakerconfig.ScopePod))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"percent": 20`, `"minPerSecond": 10`, `"k": 1.5`} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("ConfigOf rendered no %s:\n%s", want, doc)
		}
	}
	if strings.Contains(string(doc), `"fleet"`) {
		t.Errorf("ConfigOf rendered fleet counts, which are the operator's:\n%s", doc)
	}
	c, err := breakerconfig.Parse(doc)
	if err != nil {
		t.Fatal(err)
	}
	back, err := PolicyOf(c)
	if err != nil {
		t.Fatal(err)
	}
	if back.RetryBudget == nil || *back.RetryBudget != *p.RetryBudget || back.Throttle == nil || *back.Throttle != *p.Throttle {
		t.Fatalf("policy %+v %+v", back.RetryBudget, back.Throttle)
	}
	c.RetryBudget.Percent, c.Throttle.K = 99, 9
	if back.RetryBudget.Percent != 20 || back.Throttle.K != 1.5 {
		t.Error("changing the config changed the policy made from it")
	}
	// Without either policy, neither is read into the policy.
	plain, err := breakerconfig.Parse([]byte(defaultDocument))
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := PolicyOf(plain); p.RetryBudget != nil || p.Throttle != nil {
		t.Errorf("a plain document read as fleet policies: %+v", p)
	}
	f := breakerconfig.Fleet{Pods: 200, Requests: 12345, Accepts: 6000}
	if got, ok := fleetOf(&breakerconfig.Config{Fleet: &f}, true); !ok || got != (breaker.Fleet{Pods: 200, Requests: 12345, Accepts: 6000}) {
		t.Errorf("fleetOf(%+v) = %+v", f, got)
	}
	if _, ok := fleetOf(&breakerconfig.Config{Fleet: &f}, false); ok {
		t.Error("fleetOf of a breaker that reports no traffic")
	}
}

// A document Validate refuses converts to no policy, with the same error.
func TestPolicyOfRefusesWhatValidateRefuses(t *testing.T) {
	c, err := breakerconfig.Parse([]byte(defaultDocument))
	if err != nil {
		t.Fatal(err)
	}
	c.MinimumThroughput = 0
	if _, err := PolicyOf(c); err == nil || !strings.Contains(err.Error(), "minimumThroughput") {
		t.Errorf("PolicyOf with minimumThroughput 0: %v", err)
	}
}

func TestStateOf(t *testing.T) {
	for s, want := range map[string]breaker.State{breakerconfig.StateClosed: breaker.Closed,
		breakerconfig.StateOpen: breaker.Open, breakerconfig.StateHalfOpen: breaker.HalfOpen} {
		if st, ok := stateOf(s); !ok || st != want {
			t.Errorf("stateOf(%q) = %v, %v", s, st, ok)
		}
	}
	for _, s := range []string{"ajar", "open", "half_open", ""} {
		if _, ok := stateOf(s); ok {
			t.Errorf("stateOf accepted %q", s)
		}
	}
}

// Whatever the bytes, a document Parse accepts converts to a policy the breaker takes:
// the wire's rules are the breaker's and more.
func FuzzPolicyOf(f *testing.F) {
	f.Add([]byte(defaultDocument))
	f.Add([]byte(`{"name":"x","openTimeout":"1ns","window":"1h","failureRatio":1,"minimumThroughput":1,"successThreshold":1,"halfOpenPermittedCalls":1,"mode":"","scope":""}`))
	f.Add([]byte(strings.Replace(defaultDocument, `"scope": "Pod"`, `"scope": "Fleet", "slowCallDuration": "1.5s", "slowCallRatio": 0.8, "maxOpenTimeout": "5m",
  "retryBudget": {"percent": 0, "minPerSecond": 0}, "throttle": {"k": 1},
  "verdict": {"state": "Open", "since": "2026-11-29T10:00:00.123Z", "consecutiveOpens": 3, "openTimeout": "2m0s"}`, 1)))
	f.Add([]byte(strings.Replace(defaultDocument, `"scope": "Pod"`, `"scope": "Pod", "slowCallRatio": 0.3, "maxOpenTimeout": "30s"`, 1)))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := breakerconfig.Parse(data)
		if err != nil {
			return
		}
		p, err := PolicyOf(c)
		if err != nil {
			t.Fatalf("Parse accepted a config whose policy is invalid: %v", err)
		}
		if _, err := breaker.New(c.Name, p); err != nil {
			t.Fatalf("breaker.New refused a parsed policy: %v", err)
		}
		if v := c.Verdict; v != nil {
			if _, ok := stateOf(v.State); !ok {
				t.Fatalf("Parse accepted verdict state %q, which stateOf does not know", v.State)
			}
		}
	})
}
