package counting

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	celgo "github.com/google/cel-go/cel"
	"github.com/google/cel-go/ext"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// nodeReportCRD is the NodeBreakerReport CRD as controller-gen writes it: the schema the
// API server checks an agent's write against.
const nodeReportCRD = "../../config/crd/bases/resilience.fusebox.dev_nodebreakerreports.yaml"

// nodeReportPolicy is the admission policy of node reports: it checks how an entry's
// counts bound each other (its validations over object.breakers).
const nodeReportPolicy = "../../config/policy/nodebreakerreport_identity.yaml"

// entrySchema checks a NodeBreakerEntry as the API server does an item of
// spec.breakers: its OpenAPI bounds, its CEL rules, then the admission policy's bounds
// between its counts.
type entrySchema struct {
	openAPI validation.SchemaValidator
	rules   *cel.Validator
	bounds  []policyBound
}

// policyBound is one of the policy's validations over object.breakers, compiled.
type policyBound struct {
	check, message celgo.Program
}

// loadPolicyBounds compiles the validations of the node report policy that judge
// object.breakers, with the variables they read.
func loadPolicyBounds() ([]policyBound, error) {
	raw, err := os.ReadFile(nodeReportPolicy)
	if err != nil {
		return nil, err
	}
	var policy struct {
		Spec struct {
			Validations []struct {
				Expression        string `json:"expression"`
				MessageExpression string `json:"messageExpression"`
			} `json:"validations"`
		} `json:"spec"`
	}
	// The first document is the policy; its binding follows.
	if err := yaml.Unmarshal([]byte(strings.SplitN(string(raw), "\n---\n", 2)[0]), &policy); err != nil {
		return nil, err
	}
	// What the policy's expressions use of the API server's CEL: the standard macros and
	// the strings extension (join).
	env, err := celgo.NewEnv(ext.Strings(), celgo.Variable("object", celgo.DynType), celgo.Variable("request", celgo.DynType))
	if err != nil {
		return nil, err
	}
	compile := func(expr string) (celgo.Program, error) {
		ast, iss := env.Compile(expr)
		if iss.Err() != nil {
			return nil, fmt.Errorf("%s: %w", expr, iss.Err())
		}
		return env.Program(ast)
	}
	var bounds []policyBound
	for _, v := range policy.Spec.Validations {
		if !strings.Contains(v.Expression, "object.breakers.all(") {
			continue
		}
		check, err := compile(v.Expression)
		if err != nil {
			return nil, err
		}
		message, err := compile(v.MessageExpression)
		if err != nil {
			return nil, err
		}
		bounds = append(bounds, policyBound{check: check, message: message})
	}
	if len(bounds) == 0 {
		return nil, fmt.Errorf("%s: no validation of object.breakers", nodeReportPolicy)
	}
	return bounds, nil
}

var loadEntrySchema = sync.OnceValues(func() (*entrySchema, error) {
	raw, err := os.ReadFile(nodeReportCRD)
	if err != nil {
		return nil, err
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		return nil, err
	}
	item := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["breakers"].Items.Schema
	var internal apiextensions.JSONSchemaProps
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(item, &internal, nil); err != nil {
		return nil, err
	}
	structural, err := structuralschema.NewStructural(&internal)
	if err != nil {
		return nil, err
	}
	openAPI, _, err := validation.NewSchemaValidator(&internal)
	if err != nil {
		return nil, err
	}
	bounds, err := loadPolicyBounds()
	if err != nil {
		return nil, err
	}
	return &entrySchema{openAPI: openAPI, rules: cel.NewValidator(structural, false, celconfig.PerCallLimit), bounds: bounds}, nil
})

// validate returns what the API server would refuse in e.
func (s *entrySchema) validate(e *resiliencev1alpha1.NodeBreakerEntry) field.ErrorList {
	raw, err := json.Marshal(e)
	if err != nil {
		return field.ErrorList{field.InternalError(nil, err)}
	}
	var obj map[string]any
	// As the API server decodes a body: integers as int64.
	if err := utiljson.Unmarshal(raw, &obj); err != nil {
		return field.ErrorList{field.InternalError(nil, err)}
	}
	path := field.NewPath("breakers").Index(0)
	errs := validation.ValidateCustomResource(path, obj, s.openAPI)
	ruleErrs, _ := s.rules.Validate(context.Background(), path, nil, obj, nil, celconfig.RuntimeCELCostBudget)
	errs = append(errs, ruleErrs...)
	vars := map[string]any{"object": map[string]any{"breakers": []any{obj}}, "request": map[string]any{"operation": "UPDATE"}}
	for _, b := range s.bounds {
		ok, _, err := b.check.Eval(vars)
		if err != nil {
			errs = append(errs, field.InternalError(path, err))
			continue
		}
		if ok.Value() == true {
			continue
		}
		msg, _, err := b.message.Eval(vars)
		if err != nil {
			errs = append(errs, field.InternalError(path, err))
			continue
		}
		errs = append(errs, field.Invalid(path, nil, fmt.Sprint(msg.Value())))
	}
	return errs
}

// admitted fails t unless the API server would admit every entry.
func admitted(t testing.TB, entries []resiliencev1alpha1.NodeBreakerEntry) {
	t.Helper()
	s, err := loadEntrySchema()
	if err != nil {
		t.Fatalf("reading the CRD: %v", err)
	}
	for i := range entries {
		if errs := s.validate(&entries[i]); len(errs) > 0 {
			t.Errorf("entry %s/%s refused: %v\n%+v", entries[i].Name, entries[i].Revision, errs.ToAggregate(), entries[i])
		}
	}
}

// The checker refuses what the schema refuses: a test that passes through it proves
// something only if it can fail.
func TestEntrySchemaRefusesWhatTheCRDRefuses(t *testing.T) {
	s, err := loadEntrySchema()
	if err != nil {
		t.Fatal(err)
	}
	good := resiliencev1alpha1.NodeBreakerEntry{Name: "b", Pods: 3, Closed: 2, Open: 1, EarnedOpen: 1, OnLatestConfig: 3, Calls: 10, Failures: 5, Requests: 10, Accepts: 10}
	if errs := s.validate(&good); len(errs) > 0 {
		t.Fatalf("a consistent entry refused: %v", errs)
	}
	for _, tc := range []struct {
		name  string
		spoil func(e *resiliencev1alpha1.NodeBreakerEntry)
		want  string // in the refusal
	}{
		{"more states than pods", func(e *resiliencev1alpha1.NodeBreakerEntry) { e.HalfOpen = 1 }, "closed, open and halfOpen together must be at most pods"},
		{"an earned Open not open", func(e *resiliencev1alpha1.NodeBreakerEntry) { e.EarnedOpen = 2 }, "earnedOpen must be at most open"},
		{"failures beyond calls", func(e *resiliencev1alpha1.NodeBreakerEntry) { e.Failures = 11 }, "must be at most calls"},
		{"accepts beyond requests", func(e *resiliencev1alpha1.NodeBreakerEntry) { e.Accepts = 11 }, "accepts, retries and throttled must each be at most requests"},
		{"more notable pods than pods", func(e *resiliencev1alpha1.NodeBreakerEntry) {
			e.Pods, e.Closed, e.Open, e.EarnedOpen, e.OnLatestConfig = 1, 0, 1, 1, 1
			pod := func(name string) resiliencev1alpha1.NotablePod {
				return resiliencev1alpha1.NotablePod{Name: name, UID: types.UID(name), Reason: tripped, PodCircuit: resiliencev1alpha1.PodCircuit{State: open, Since: metav1.NewTime(t0)}}
			}
			e.Notable = []resiliencev1alpha1.NotablePod{pod("a"), pod("b")}
		}, "notable may name at most pods pods"},
		{"pods past the bound", func(e *resiliencev1alpha1.NodeBreakerEntry) { e.Pods = resiliencev1alpha1.MaxNodePods + 1 }, "pods: Invalid value"},
		{"a configError past 256 characters", func(e *resiliencev1alpha1.NodeBreakerEntry) {
			e.ConfigErrors, e.ConfigError = 1, strings.Repeat("x", 257)
		}, "configError: Too long"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := good
			tc.spoil(&e)
			errs := s.validate(&e)
			if len(errs) == 0 {
				t.Fatalf("%+v admitted", e)
			}
			if got := errs.ToAggregate().Error(); !strings.Contains(got, tc.want) {
				t.Errorf("refused with %q, want %q", got, tc.want)
			}
		})
	}
}
