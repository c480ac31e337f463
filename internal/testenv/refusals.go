package testenv

import (
	"errors"
	"fmt"
	"math"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Refusal is a CircuitBreaker spec the API server must refuse by itself (the CRD's schema
// and CEL rules), whether the operator's webhooks are installed or not: the suite of
// api/v1alpha1 sends it with no webhook, the one of pkg/webhook with every webhook.
type Refusal struct {
	Name string
	Spec map[string]any
	// Field is the path the refusal must name (as the API server spells it).
	Field string
	// Says is what the refusal must say about it.
	Says string
	// Enum: the value is outside an OpenAPI enum. The API server then runs none of the
	// CEL rules and adds a line of its own saying so ("<nil>: ... some validation rules
	// were not checked"); the enum stays for what it gives clients (kubectl explain,
	// editors), so that line is allowed here.
	Enum bool
}

// Refusals are the inputs issue 18 found accepted without the webhooks (and some with
// them), and the durations of issue 21 whose message read like the validator's insides.
func Refusals() []Refusal {
	override := func(mode, reason string) map[string]any {
		return map[string]any{"override": map[string]any{"mode": mode, "until": "2030-01-01T00:00:00Z", "reason": reason}}
	}
	const notADuration = "must be a duration such as 30s or 1m30s"
	const wholeMillis = "must be a whole number of milliseconds"
	return []Refusal{
		{"openTimeout below a millisecond's resolution", map[string]any{"openTimeout": "1.0000001s"}, "spec.openTimeout", wholeMillis, false},
		{"window below a millisecond's resolution", map[string]any{"window": "1.5001s"}, "spec.window", wholeMillis, false},
		{"slowCallDuration below a millisecond's resolution", map[string]any{"slowCallDuration": "1500us"}, "spec.slowCallDuration", wholeMillis, false},
		{"maxOpenTimeout below a millisecond's resolution", map[string]any{"maxOpenTimeout": "60000001us"}, "spec.maxOpenTimeout", wholeMillis, false},
		{"openTimeout below 1s", map[string]any{"openTimeout": "999ms"}, "spec.openTimeout", "must be between 1s and 24h", false},
		{"window below 1s", map[string]any{"window": "0.5s"}, "spec.window", "must be between 1s and 1h", false},
		{"slowCallDuration below 1ms", map[string]any{"slowCallDuration": "999us"}, "spec.slowCallDuration", "must be between 1ms and 1h", false},
		{"openTimeout negative", map[string]any{"openTimeout": "-5s"}, "spec.openTimeout", notADuration, false},
		{"openTimeout in words", map[string]any{"openTimeout": "thirty seconds"}, "spec.openTimeout", notADuration, false},
		{"window without a unit", map[string]any{"window": "10"}, "spec.window", notADuration, false},
		{"slowCallDuration in days", map[string]any{"slowCallDuration": "1d"}, "spec.slowCallDuration", notADuration, false},
		{"maxOpenTimeout in words", map[string]any{"maxOpenTimeout": "forever"}, "spec.maxOpenTimeout", notADuration, false},
		{"override mode Enforce", override("Enforce", "INC-1"), "spec.override.mode", `supported values: "ForcedOpen", "ForcedClosed"`, true},
		{"override mode MetricsOnly", override("MetricsOnly", "INC-1"), "spec.override.mode", `supported values: "ForcedOpen", "ForcedClosed"`, true},
		{"override reason blank", override("ForcedOpen", "   \t "), "spec.override.reason", "not be blank", false},
		{"minimumThroughput 2^31-1", map[string]any{"minimumThroughput": math.MaxInt32}, "spec.minimumThroughput", "1000000", false},
		{"halfOpenPermittedCalls 2^31-1", map[string]any{"halfOpenPermittedCalls": math.MaxInt32}, "spec.halfOpenPermittedCalls", "1000", false},
		{"successThreshold 2^31-1", map[string]any{"successThreshold": math.MaxInt32}, "spec.successThreshold", "1000", false},
		// Issue 22: the fleet policies' bounds.
		{"retryBudget.percent negative", map[string]any{"retryBudget": map[string]any{"percent": -10}}, "spec.retryBudget.percent", "greater than or equal to 1", false},
		{"retryBudget.percent above 100", map[string]any{"retryBudget": map[string]any{"percent": 150}}, "spec.retryBudget.percent", "less than or equal to 100", false},
		{"retryBudget.minPerSecond negative", map[string]any{"retryBudget": map[string]any{"minPerSecond": -1}}, "spec.retryBudget.minPerSecond", "greater than or equal to 0", false},
		{"retryBudget.minPerSecond beyond its bound", map[string]any{"retryBudget": map[string]any{"minPerSecond": 10001}}, "spec.retryBudget.minPerSecond", "less than or equal to 10000", false},
		{"throttle.k below 1", map[string]any{"throttle": map[string]any{"k": 0.5}}, "spec.throttle.k", "greater than or equal to 1", false},
		{"throttle.k above 10", map[string]any{"throttle": map[string]any{"k": 10.5}}, "spec.throttle.k", "less than or equal to 10", false},
		// Issue 44: the fleet's limit on calls in flight.
		{"concurrency without maxInFlight", map[string]any{"concurrency": map[string]any{}}, "spec.concurrency.maxInFlight", "must be set", false},
		{"concurrency.maxInFlight 0", concurrency(0, nil), "spec.concurrency.maxInFlight", "greater than or equal to 1", false},
		{"concurrency.maxInFlight above its bound", concurrency(1_000_001, nil), "spec.concurrency.maxInFlight", "less than or equal to 1000000", false},
		{"concurrency.maxWait above 10s", concurrency(10, map[string]any{"maxWait": "10.001s"}), "spec.concurrency.maxWait", "must be between 0s and 10s", false},
		{"concurrency.maxWait negative", concurrency(10, map[string]any{"maxWait": "-1s"}), "spec.concurrency.maxWait", "must be a duration such as 0s or 250ms", false},
		{"concurrency.maxWait below a millisecond's resolution", concurrency(10, map[string]any{"maxWait": "1500us"}), "spec.concurrency.maxWait", wholeMillis, false},
		{"concurrency.adaptive.tolerance below 1", concurrency(10, map[string]any{"adaptive": map[string]any{"tolerance": 0.9}}), "spec.concurrency.adaptive.tolerance", "greater than or equal to 1", false},
		{"concurrency.adaptive.tolerance above 5", concurrency(10, map[string]any{"adaptive": map[string]any{"tolerance": 5.5}}), "spec.concurrency.adaptive.tolerance", "less than or equal to 5", false},
		{"concurrency.adaptive.minLimit 0", concurrency(10, map[string]any{"adaptive": map[string]any{"minLimit": 0}}), "spec.concurrency.adaptive.minLimit", "greater than or equal to 1", false},
	}
}

// concurrency is a spec whose concurrency has maxInFlight and the other fields of more.
func concurrency(maxInFlight int, more map[string]any) map[string]any {
	c := map[string]any{"maxInFlight": maxInFlight}
	for k, v := range more {
		c[k] = v
	}
	return map[string]any{"concurrency": c}
}

// Breaker is an unstructured CircuitBreaker with spec, so that a test can send what a
// typed client could not (a string where a number belongs, a mode the Go type would
// accept but the schema must not).
func Breaker(namespace, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "resilience.fusebox.dev/v1alpha1",
		"kind":       "CircuitBreaker",
		"metadata":   map[string]any{"name": name, "namespace": namespace},
	}}
	if spec != nil {
		u.Object["spec"] = spec
	}
	return u
}

// CheckRefusal returns nil if err is the API server's refusal of r: Invalid, naming
// r.Field, saying r.Says, with none of the lines that read like the validator's insides
// (a regular expression, "<nil>", "some validation rules were not checked").
func CheckRefusal(r Refusal, err error) error {
	if err == nil {
		return fmt.Errorf("%s: accepted", r.Name)
	}
	if !apierrors.IsInvalid(err) {
		return fmt.Errorf("%s: %v, want Invalid", r.Name, err)
	}
	msg := err.Error()
	if !strings.Contains(msg, r.Field) || !strings.Contains(msg, r.Says) {
		return fmt.Errorf("%s: %q does not say %q about %s", r.Name, msg, r.Says, r.Field)
	}
	if r.Enum {
		return nil
	}
	for _, inside := range []string{"<nil>", "were not checked", "should match", "^("} {
		if strings.Contains(msg, inside) {
			return fmt.Errorf("%s: %q says %q", r.Name, msg, inside)
		}
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Details != nil {
		if n := len(status.Status().Details.Causes); n != 1 {
			return fmt.Errorf("%s: %d causes, want the one: %v", r.Name, n, msg)
		}
	}
	return nil
}
