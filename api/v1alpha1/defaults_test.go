package v1alpha1

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestDefaultMarkers holds the CRD's +kubebuilder:default markers, which cannot read a Go
// constant, to the constants the defaulter, the renderer and the library read: the
// generated schema's default of every spec field must be its constant.
func TestDefaultMarkers(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "config", "crd", "bases", "resilience.fusebox.dev_circuitbreakers.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Name   string
				Schema struct {
					OpenAPIV3Schema schemaProps `json:"openAPIV3Schema"`
				}
			}
		}
	}
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		t.Fatal(err)
	}
	if len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Name != GroupVersion.Version {
		t.Fatalf("want one version %s in the CRD, got %+v", GroupVersion.Version, crd.Spec.Versions)
	}
	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	for _, tc := range []struct {
		path []string
		want any
	}{
		{[]string{"openTimeout"}, DefaultOpenTimeout.String()},
		{[]string{"window"}, DefaultWindow.String()},
		{[]string{"failureRatePercent"}, DefaultFailureRatePercent},
		{[]string{"minimumThroughput"}, DefaultMinimumThroughput},
		{[]string{"successThreshold"}, DefaultSuccessThreshold},
		{[]string{"halfOpenPermittedCalls"}, DefaultHalfOpenPermittedCalls},
		{[]string{"mode"}, string(ModeEnforce)},
		{[]string{"scope"}, string(ScopePod)},
		{[]string{"fleetQuorumPercent"}, DefaultFleetQuorumPercent},
		{[]string{"slowCallRatePercent"}, DefaultSlowCallRatePercent},
		{[]string{"retryBudget", "percent"}, DefaultRetryBudgetPercent},
		{[]string{"retryBudget", "minPerSecond"}, DefaultRetryMinPerSecond},
		{[]string{"throttle", "k"}, DefaultThrottleK},
		{[]string{"concurrency", "maxWait"}, DefaultMaxWait.String()},
		{[]string{"concurrency", "adaptive", "tolerance"}, DefaultAdaptiveTolerance},
		{[]string{"concurrency", "adaptive", "minLimit"}, DefaultAdaptiveMinLimit},
	} {
		field := spec
		for _, name := range tc.path {
			field = field.Properties[name]
		}
		want, err := json.Marshal(tc.want)
		if err != nil {
			t.Fatal(err)
		}
		if string(field.Default) != string(want) {
			t.Errorf("spec.%v: the CRD's default is %s, the constant %s", tc.path, field.Default, want)
		}
	}
}

// schemaProps is the part of an OpenAPI schema TestDefaultMarkers reads.
type schemaProps struct {
	Default    json.RawMessage        `json:"default"`
	Properties map[string]schemaProps `json:"properties"`
}
