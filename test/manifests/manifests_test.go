// Package manifests checks what `kustomize build config/default` deploys: no
// Docker engine or cluster runs here, so the rendered YAML is the artifact.
package manifests

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/webhook/podinject"
)

// kustomizeBin is the kustomize binary make test names (KUSTOMIZE), else bin/kustomize.
func kustomizeBin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("KUSTOMIZE")
	if bin == "" {
		bin = filepath.Join("..", "..", "bin", "kustomize")
	}
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("kustomize not found at %s; `make kustomize` builds it", bin)
		}
		t.Skipf("SKIPPED: kustomize not found at %s; run `make kustomize` (or `make test`, which builds it) to render config/", bin)
	}
	abs, err := filepath.Abs(bin)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

func kustomizeBuild(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	bin := kustomizeBin(t)
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "build", filepath.Join("..", "..", dir))
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kustomize build %s: %v\n%s", dir, err, stderr.String())
	}
	return decodeObjects(t, out)
}

// decodeObjects reads the objects of a multi-document YAML stream.
func decodeObjects(t *testing.T, out []byte) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	var objs []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return objs
		} else if err != nil {
			t.Fatalf("parse kustomize output: %v", err)
		}
		objs = append(objs, u)
	}
}

func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string, into any) {
	t.Helper()
	for _, u := range objs {
		if u.GetKind() == kind && u.GetName() == name {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, into); err != nil {
				t.Fatalf("%s %s: %v", kind, name, err)
			}
			return
		}
	}
	t.Fatalf("config/default renders no %s %s", kind, name)
}

func TestDefaultDeploysTheOperator(t *testing.T) {
	objs := kustomizeBuild(t, "config/default")

	var ns corev1.Namespace
	find(t, objs, "Namespace", "fusebox-system", &ns)
	reportsCRD := breakerconfig.ReportResource + "." + breakerconfig.Group
	for _, name := range []string{"circuitbreakers." + breakerconfig.Group, reportsCRD} {
		var crd unstructured.Unstructured
		find(t, objs, "CustomResourceDefinition", name, &crd.Object)
	}
	var reports apiextensionsv1.CustomResourceDefinition
	find(t, objs, "CustomResourceDefinition", reportsCRD, &reports)
	if n := reports.Spec.Names; reports.Spec.Scope != apiextensionsv1.NamespaceScoped || n.Kind != breakerconfig.ReportKind ||
		n.Plural != breakerconfig.ReportResource || !slices.Equal(n.ShortNames, []string{"brep"}) || !slices.Equal(n.Categories, []string{"fusebox"}) {
		t.Errorf("BreakerReport CRD: scope %s names %+v, want namespaced BreakerReport/breakerreports, short name brep, category fusebox", reports.Spec.Scope, n)
	}

	var role rbacv1.ClusterRole
	find(t, objs, "ClusterRole", "fusebox-manager-role", &role)
	for _, r := range role.Rules {
		for _, list := range [][]string{r.APIGroups, r.Resources, r.Verbs} {
			for _, v := range list {
				if v == "*" {
					t.Errorf("manager role has a wildcard: %+v", r)
				}
			}
		}
	}
	// The operator reads and prunes reports, and never writes one; it may change or delete
	// no ConfigMap but the one it publishes (create cannot be narrowed by name).
	if got, want := grants(role.Rules, breakerconfig.Group, breakerconfig.ReportResource), map[string][]string{
		"get": nil, "list": nil, "watch": nil, "delete": nil,
	}; !reflect.DeepEqual(got, want) {
		t.Errorf("manager role on breakerreports: %v, want %v", got, want)
	}
	if got, want := grants(role.Rules, "", "configmaps"), map[string][]string{
		"list": nil, "watch": nil, "create": nil,
		"get": {breakerconfig.ConfigMapName}, "update": {breakerconfig.ConfigMapName}, "delete": {breakerconfig.ConfigMapName},
	}; !reflect.DeepEqual(got, want) {
		t.Errorf("manager role on configmaps: %v, want %v", got, want)
	}
	var binding rbacv1.ClusterRoleBinding
	find(t, objs, "ClusterRoleBinding", "fusebox-manager-rolebinding", &binding)
	if binding.Subjects[0].Name != "fusebox-controller-manager" || binding.Subjects[0].Namespace != "fusebox-system" {
		t.Errorf("role bound to %+v, want the manager's service account", binding.Subjects)
	}

	// An application pod reads the published ConfigMap and writes its report (which one
	// is the admission policy's to say); nothing else: no Pod (its UID comes from the
	// downward API), and in particular nothing of a CircuitBreaker.
	var client rbacv1.ClusterRole
	find(t, objs, "ClusterRole", "fusebox-breaker-client", &client)
	want := map[string]map[string][]string{
		"/configmaps":                           {"get": {breakerconfig.ConfigMapName}, "list": {breakerconfig.ConfigMapName}, "watch": {breakerconfig.ConfigMapName}},
		"resilience.fusebox.dev/breakerreports": {"get": nil, "create": nil, "patch": nil, "update": nil},
	}
	got := map[string]map[string][]string{}
	for _, r := range client.Rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				got[g+"/"+res] = grants(client.Rules, g, res)
			}
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("breaker client role grants %v, want exactly %v", got, want)
	}

	// The API server's own check of which report a pod may write, bound under the name
	// the prefix gives its policy.
	var vap admissionregistrationv1.ValidatingAdmissionPolicy
	find(t, objs, "ValidatingAdmissionPolicy", "fusebox-breakerreport-identity", &vap)
	if vap.Namespace != "" || vap.Spec.FailurePolicy == nil || *vap.Spec.FailurePolicy != admissionregistrationv1.Fail {
		t.Errorf("policy: namespace %q failurePolicy %v, want cluster-scoped and Fail", vap.Namespace, vap.Spec.FailurePolicy)
	}
	if rules := vap.Spec.MatchConstraints.ResourceRules; len(rules) != 1 || !slices.Equal(rules[0].Resources, []string{breakerconfig.ReportResource}) ||
		!slices.Equal(rules[0].APIGroups, []string{breakerconfig.Group}) {
		t.Errorf("policy matches %+v, want breakerreports only", rules)
	}
	var vapBinding admissionregistrationv1.ValidatingAdmissionPolicyBinding
	find(t, objs, "ValidatingAdmissionPolicyBinding", "fusebox-breakerreport-identity", &vapBinding)
	if vapBinding.Spec.PolicyName != vap.Name || !slices.Equal(vapBinding.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}) {
		t.Errorf("binding: policyName %q actions %v, want %q and Deny", vapBinding.Spec.PolicyName, vapBinding.Spec.ValidationActions, vap.Name)
	}
	// And its refusal of tokens bound to no pod, bound outside the namespaces labelled to
	// accept them.
	var unbound admissionregistrationv1.ValidatingAdmissionPolicyBinding
	find(t, objs, "ValidatingAdmissionPolicyBinding", "fusebox-breakerreport-bound-token", &unbound)
	sel := unbound.Spec.MatchResources
	if unbound.Spec.PolicyName != "fusebox-breakerreport-bound-token" || sel == nil || sel.NamespaceSelector == nil ||
		len(sel.NamespaceSelector.MatchExpressions) != 1 || sel.NamespaceSelector.MatchExpressions[0].Key != resiliencev1alpha1.LabelUnboundReportTokens ||
		!slices.Equal(sel.NamespaceSelector.MatchExpressions[0].Values, []string{resiliencev1alpha1.LabelUnboundReportTokensAllowed}) {
		t.Errorf("bound-token binding %+v, want policy fusebox-breakerreport-bound-token outside namespaces labelled %s=%s",
			unbound.Spec, resiliencev1alpha1.LabelUnboundReportTokens, resiliencev1alpha1.LabelUnboundReportTokensAllowed)
	}
	// And its check of the override's audit record, which holds without the webhook.
	var audit admissionregistrationv1.ValidatingAdmissionPolicy
	find(t, objs, "ValidatingAdmissionPolicy", "fusebox-circuitbreaker-overridden-by", &audit)
	if rules := audit.Spec.MatchConstraints.ResourceRules; audit.Spec.FailurePolicy == nil || *audit.Spec.FailurePolicy != admissionregistrationv1.Fail ||
		len(rules) != 1 || !slices.Equal(rules[0].Resources, []string{"circuitbreakers"}) {
		t.Errorf("audit policy: failurePolicy %v matches %+v, want Fail on circuitbreakers only", audit.Spec.FailurePolicy, rules)
	}
	var auditBinding admissionregistrationv1.ValidatingAdmissionPolicyBinding
	find(t, objs, "ValidatingAdmissionPolicyBinding", "fusebox-circuitbreaker-overridden-by", &auditBinding)
	if auditBinding.Spec.PolicyName != audit.Name || !slices.Equal(auditBinding.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}) {
		t.Errorf("audit binding: policyName %q actions %v, want %q and Deny", auditBinding.Spec.PolicyName, auditBinding.Spec.ValidationActions, audit.Name)
	}

	var dep appsv1.Deployment
	find(t, objs, "Deployment", "fusebox-controller-manager", &dep)
	if dep.Namespace != "fusebox-system" {
		t.Errorf("deployment in namespace %q", dep.Namespace)
	}
	pod := dep.Spec.Template.Spec
	if pod.ServiceAccountName != "fusebox-controller-manager" {
		t.Errorf("service account %q", pod.ServiceAccountName)
	}
	if psc := pod.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot ||
		psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context %+v: want runAsNonRoot and seccomp RuntimeDefault", psc)
	}
	c := pod.Containers[0]
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("container security context %+v: want a read-only root and no privilege escalation", sc)
	}
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" || c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("probes: liveness %+v readiness %+v", c.LivenessProbe, c.ReadinessProbe)
	}
}

// grants returns what rules grant on one resource: each verb with the resource names it
// is narrowed to (nil: every object), sorted.
func grants(rules []rbacv1.PolicyRule, group, resource string) map[string][]string {
	out := map[string][]string{}
	for _, r := range rules {
		if !slices.Contains(r.APIGroups, group) || !slices.Contains(r.Resources, resource) {
			continue
		}
		for _, v := range r.Verbs {
			if len(r.ResourceNames) == 0 {
				out[v] = nil
				continue
			}
			if prev, ok := out[v]; ok && prev == nil {
				continue // already granted on every object
			}
			out[v] = append(out[v], r.ResourceNames...)
			slices.Sort(out[v])
		}
	}
	return out
}

func TestDefaultServesTheWebhooks(t *testing.T) {
	objs := kustomizeBuild(t, "config/default")
	var mutating admissionregistrationv1.MutatingWebhookConfiguration
	find(t, objs, "MutatingWebhookConfiguration", "fusebox-mutating-webhook-configuration", &mutating)
	overriddenBy := false
	for _, w := range mutating.Webhooks {
		if w.Name == "overridden-by.circuitbreakers.resilience.fusebox.dev" {
			// The annotation is an audit record: without the webhook, a client's own value would stand.
			overriddenBy = w.FailurePolicy != nil && *w.FailurePolicy == admissionregistrationv1.Fail && len(w.MatchConditions) == 1
		}
		if w.ClientConfig.Service == nil || w.ClientConfig.Service.Name != "fusebox-webhook-service" || w.ClientConfig.Service.Namespace != "fusebox-system" {
			t.Errorf("webhook %s calls %+v, want the fusebox-system/fusebox-webhook-service", w.Name, w.ClientConfig.Service)
		}
		if w.Rules[0].Resources[0] == "pods" && (w.FailurePolicy == nil || *w.FailurePolicy != admissionregistrationv1.Ignore) {
			t.Errorf("pod webhook %s: failurePolicy %v; Fusebox must never stop a pod from starting", w.Name, w.FailurePolicy)
		}
	}
	if !overriddenBy {
		t.Error("no overridden-by webhook that fails closed, with its match condition, in config/default")
	}
	var validating admissionregistrationv1.ValidatingWebhookConfiguration
	find(t, objs, "ValidatingWebhookConfiguration", "fusebox-validating-webhook-configuration", &validating)
	var svc corev1.Service
	find(t, objs, "Service", "fusebox-webhook-service", &svc)
	var dep appsv1.Deployment
	find(t, objs, "Deployment", "fusebox-controller-manager", &dep)
	if args := strings.Join(dep.Spec.Template.Spec.Containers[0].Args, " "); !strings.Contains(args, "--webhook-cert-mode=self-signed") {
		t.Errorf("manager args %q: the default deployment issues its own certificate", args)
	}
}

func TestSamplesAreCircuitBreakers(t *testing.T) {
	objs := kustomizeBuild(t, "config/samples")
	if len(objs) == 0 {
		t.Fatal("config/samples renders nothing")
	}
	for _, u := range objs {
		if u.GetAPIVersion() != "resilience.fusebox.dev/v1alpha1" || u.GetKind() != "CircuitBreaker" {
			t.Errorf("sample %s %s is not a CircuitBreaker", u.GetAPIVersion(), u.GetKind())
		}
	}
}

// Metrics are served over HTTPS to authorized scrapers only (cmd/manager's
// --metrics-secure): the manager may ask the API server to review tokens and
// access, and scrapers get a role that reads /metrics and nothing else.
func TestDefaultServesMetricsSecurely(t *testing.T) {
	objs := kustomizeBuild(t, "config/default")

	var dep appsv1.Deployment
	find(t, objs, "Deployment", "fusebox-controller-manager", &dep)
	c := dep.Spec.Template.Spec.Containers[0]
	if args := strings.Join(c.Args, " "); !strings.Contains(args, "--metrics-secure") || strings.Contains(args, "--metrics-secure=false") {
		t.Errorf("manager args %q: metrics must be served securely", args)
	}
	var svc corev1.Service
	find(t, objs, "Service", "fusebox-controller-manager-metrics-service", &svc)
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.StrVal != "metrics" {
		t.Errorf("metrics Service ports %+v, want one targeting the manager's metrics port", svc.Spec.Ports)
	}

	var reader rbacv1.ClusterRole
	find(t, objs, "ClusterRole", "fusebox-metrics-reader", &reader)
	if len(reader.Rules) != 1 || strings.Join(reader.Rules[0].NonResourceURLs, ",") != "/metrics" || strings.Join(reader.Rules[0].Verbs, ",") != "get" {
		t.Errorf("metrics-reader grants %+v, want GET /metrics only", reader.Rules)
	}
	var auth rbacv1.ClusterRole
	find(t, objs, "ClusterRole", "fusebox-metrics-auth-role", &auth)
	granted := map[string]bool{}
	for _, r := range auth.Rules {
		for _, res := range r.Resources {
			for _, v := range r.Verbs {
				granted[res+":"+v] = true
			}
		}
	}
	if len(granted) != 2 || !granted["tokenreviews:create"] || !granted["subjectaccessreviews:create"] {
		t.Errorf("metrics-auth-role grants %v, want create on tokenreviews and subjectaccessreviews only", granted)
	}
	var binding rbacv1.ClusterRoleBinding
	find(t, objs, "ClusterRoleBinding", "fusebox-metrics-auth-rolebinding", &binding)
	if binding.RoleRef.Name != "fusebox-metrics-auth-role" || binding.Subjects[0].Name != "fusebox-controller-manager" || binding.Subjects[0].Namespace != "fusebox-system" {
		t.Errorf("metrics-auth-rolebinding %+v, want the manager's service account bound", binding)
	}
}

// The pod webhook reads the agent's Service, by name, in the operator's namespace, and
// nothing else beyond the manager's role.
func TestDefaultLetsThePodWebhookReadTheAgentService(t *testing.T) {
	objs := kustomizeBuild(t, "config/default")
	var role rbacv1.Role
	find(t, objs, "Role", "fusebox-pod-webhook", &role)
	if want := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"services"}, ResourceNames: []string{podinject.DefaultAgentService}, Verbs: []string{"get"}}}; role.Namespace != "fusebox-system" || !reflect.DeepEqual(role.Rules, want) {
		t.Errorf("Role %s/%s grants %+v, want %+v", role.Namespace, role.Name, role.Rules, want)
	}
	var binding rbacv1.RoleBinding
	find(t, objs, "RoleBinding", "fusebox-pod-webhook", &binding)
	if binding.RoleRef.Name != role.Name || len(binding.Subjects) != 1 ||
		binding.Subjects[0] != (rbacv1.Subject{Kind: "ServiceAccount", Name: "fusebox-controller-manager", Namespace: "fusebox-system"}) {
		t.Errorf("binding %+v, want the role bound to the manager's service account", binding)
	}
}
