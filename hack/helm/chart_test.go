package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

var (
	repoRoot = filepath.Join("..", "..")
	chartDir = filepath.Join(repoRoot, "dist", "chart")
)

// kustomizeBin is the kustomize `make kustomize` builds; tests that render
// config/ need it.
func kustomizeBin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("KUSTOMIZE")
	if bin == "" {
		bin = filepath.Join(repoRoot, "bin", "kustomize")
	}
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("kustomize not found at %s; `make kustomize` builds it", bin)
		}
		t.Skipf("SKIPPED: kustomize not found at %s; run `make kustomize`", bin)
	}
	return bin
}

// The committed chart is what `make helm` makes of today's config/.
func TestChartIsGeneratedFromConfig(t *testing.T) {
	chart, err := Generate(repoRoot, kustomizeBin(t))
	if err != nil {
		t.Fatal(err)
	}
	var committed []string
	if err := filepath.WalkDir(chartDir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(chartDir, path)
		committed = append(committed, filepath.ToSlash(rel))
		return nil
	}); err != nil {
		t.Fatalf("%v (run `make helm`)", err)
	}
	if !reflect.DeepEqual(committed, chart.Paths()) {
		t.Errorf("dist/chart holds %v, config/ makes %v: run `make helm`", committed, chart.Paths())
	}
	for _, p := range chart.Paths() {
		data, _ := os.ReadFile(filepath.Join(chartDir, filepath.FromSlash(p)))
		if !bytes.Equal(data, chart[p]) {
			t.Errorf("dist/chart/%s is stale: run `make helm`", p)
		}
	}
}

func TestChartLints(t *testing.T) {
	for name, vals := range map[string]map[string]any{"defaults": nil, "non-default": nonDefaultValues()} {
		linter := lint.All(chartDir, vals, "fusebox-system", false)
		for _, m := range linter.Messages {
			// INFO is advice (an icon); anything above is a finding.
			if m.Severity > support.InfoSev {
				t.Errorf("helm lint (%s values): %s", name, m)
			} else {
				t.Logf("helm lint (%s values): %s", name, m)
			}
		}
	}
}

func nonDefaultValues() map[string]any {
	var v map[string]any
	if err := yaml.Unmarshal([]byte(`
image: {repository: registry.example.com/platform/fusebox, tag: v1.2.3, pullPolicy: Always}
replicas: 3
resources: {limits: {cpu: "1", memory: 256Mi}, requests: {cpu: 100m, memory: 128Mi}}
leaderElection: {enabled: false}
webhook: {certMode: cert-manager}
metrics: {secure: false}
breakerClientRole: {enabled: false}
admissionPolicy: {enabled: false}
flowControl: {enabled: false}
fuseboxd: {image: {repository: registry.example.com/platform/fuseboxd, tag: v1.2.3-sidecar}}
nodeAgent:
  enabled: true
  image: {repository: registry.example.com/platform/fuseboxd-node, tag: v1.2.3-node, pullPolicy: Always}
  resources: {limits: {memory: 512Mi}, requests: {cpu: 50m, memory: 128Mi}}
  tolerations: [{key: dedicated, operator: Equal, value: payments, effect: NoSchedule}]
  priorityClassName: system-node-critical
`), &v); err != nil {
		panic(err)
	}
	return v
}

// helmTemplate renders the chart as `helm template --include-crds` would.
func helmTemplate(t *testing.T, namespace string, vals map[string]any) ([]*unstructured.Unstructured, error) {
	t.Helper()
	chrt, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load %s: %v", chartDir, err)
	}
	inst := action.NewInstall(&action.Configuration{})
	inst.ClientOnly, inst.DryRun, inst.IncludeCRDs, inst.Replace = true, true, true, true
	inst.ReleaseName, inst.Namespace = "fusebox", namespace
	rel, err := inst.Run(chrt, vals)
	if err != nil {
		return nil, err
	}
	return decode(t, []byte(rel.Manifest)), nil
}

func decode(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var objs []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return objs
		} else if err != nil {
			t.Fatalf("parse rendered manifests: %v", err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}

func get(t *testing.T, objs []*unstructured.Unstructured, kind, name string, into any) bool {
	t.Helper()
	for _, u := range objs {
		if u.GetKind() == kind && u.GetName() == name {
			if into != nil {
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, into); err != nil {
					t.Fatalf("%s %s: %v", kind, name, err)
				}
			}
			return true
		}
	}
	return false
}

func isAdmissionPolicy(u *unstructured.Unstructured) bool {
	return strings.HasPrefix(u.GetAPIVersion(), "admissionregistration.k8s.io/") && strings.Contains(u.GetKind(), "AdmissionPolicy")
}

// The chart's defaults deploy every object of config/default but its Namespace, same
// kind, same name, except the node agent's (nodeAgent.enabled is false by default;
// TestChartNodeAgent has the rest).
func TestChartDefaultsDeployWhatConfigDefaultDeploys(t *testing.T) {
	const ns = "ops"
	objs, err := helmTemplate(t, ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	kustomized, err := render(kustomizeBin(t), filepath.Join(repoRoot, "config", "default"))
	if err != nil {
		t.Fatal(err)
	}
	agents := 0
	for _, o := range kustomized {
		switch {
		case kind(o) == "Namespace":
			continue
		case isNodeAgent(o):
			agents++
			if get(t, objs, kind(o), name(o), nil) {
				t.Errorf("nodeAgent.enabled is false by default, yet the chart deploys %s", key(o))
			}
			continue
		}
		if !get(t, objs, kind(o), name(o), nil) {
			t.Errorf("config/default deploys %s, the chart does not", key(o))
		}
	}
	if agents != 7 {
		t.Errorf("config/default deploys %d objects of the node agent, want 7: its ServiceAccount, ClusterRole and binding, DaemonSet and Service, and its readers' ServiceAccount and Role", agents)
	}
	if len(objs) != len(kustomized)-1-agents {
		t.Errorf("the chart renders %d objects, config/default %d besides its Namespace and the node agent", len(objs), len(kustomized)-1-agents)
	}
	for _, u := range objs {
		if u.GetNamespace() != "" && u.GetNamespace() != ns {
			t.Errorf("%s %s in namespace %q, want the release's %q", u.GetKind(), u.GetName(), u.GetNamespace(), ns)
		}
		if data, _ := yaml.Marshal(u.Object); bytes.Contains(data, []byte(deployedNamespace)) {
			t.Errorf("%s %s still names %s", u.GetKind(), u.GetName(), deployedNamespace)
		}
	}

	var dep appsv1.Deployment
	if !get(t, objs, "Deployment", "fusebox-controller-manager", &dep) {
		t.Fatal("no manager Deployment")
	}
	var want appsv1.Deployment
	for _, o := range kustomized {
		if kind(o) == "Deployment" {
			_ = runtime.DefaultUnstructuredConverter.FromUnstructured(o, &want)
		}
	}
	c, wc := dep.Spec.Template.Spec.Containers[0], want.Spec.Template.Spec.Containers[0]
	if c.Image != wc.Image {
		t.Errorf("image %q, config/default deploys %q", c.Image, wc.Image)
	}
	if *dep.Spec.Replicas != *want.Spec.Replicas || !reflect.DeepEqual(c.Resources, wc.Resources) {
		t.Errorf("replicas %d, resources %+v; config/default: %d, %+v", *dep.Spec.Replicas, c.Resources, *want.Spec.Replicas, wc.Resources)
	}
	wantArgs(t, c.Args, "--leader-elect=true", "--metrics-secure=true", "--webhook-cert-mode=self-signed", sidecarBeside(c.Image))
	if !get(t, objs, "Role", "fusebox-webhook-certs", nil) || get(t, objs, "Certificate", "fusebox-serving-cert", nil) {
		t.Error("self-signed mode: want the manager's certificate Role and no cert-manager Certificate")
	}
	var mutating admissionregistrationv1.MutatingWebhookConfiguration
	get(t, objs, "MutatingWebhookConfiguration", "fusebox-mutating-webhook-configuration", &mutating)
	for _, w := range mutating.Webhooks {
		if w.ClientConfig.Service.Namespace != ns {
			t.Errorf("webhook %s calls a Service in %q", w.Name, w.ClientConfig.Service.Namespace)
		}
	}
	if !get(t, objs, "ClusterRole", breakerClientRole, nil) {
		t.Error("no fusebox-breaker-client ClusterRole")
	}
	// Priority and fairness, on by default: the operator's schema names the
	// service account of this release, in this release's namespace.
	var schema flowcontrolv1.FlowSchema
	if !get(t, objs, "FlowSchema", "fusebox-operator", &schema) || !get(t, objs, "PriorityLevelConfiguration", "fusebox-operator", nil) ||
		!get(t, objs, "FlowSchema", "fusebox-breaker-reports", nil) || !get(t, objs, "PriorityLevelConfiguration", "fusebox-breaker-reports", nil) {
		t.Error("flowControl.enabled by default: want the fusebox-operator and fusebox-breaker-reports FlowSchemas and priority levels")
	}
	if r := schema.Spec.Rules; schema.Namespace != "" || len(r) != 1 || len(r[0].Subjects) != 1 || r[0].Subjects[0].ServiceAccount == nil ||
		*r[0].Subjects[0].ServiceAccount != (flowcontrolv1.ServiceAccountSubject{Namespace: ns, Name: "fusebox-controller-manager"}) {
		t.Errorf("FlowSchema fusebox-operator: namespace %q, rules %+v; want the release's service account %s/fusebox-controller-manager", schema.Namespace, r, ns)
	}
	// The node agents' schema too, and it files them in a level of their own.
	var agentsSchema flowcontrolv1.FlowSchema
	if !get(t, objs, "FlowSchema", "fusebox-node-agents", &agentsSchema) || !get(t, objs, "PriorityLevelConfiguration", "fusebox-node-agents", nil) {
		t.Error("flowControl.enabled by default: want the fusebox-node-agents FlowSchema and priority level")
	} else if r := agentsSchema.Spec.Rules; agentsSchema.Spec.PriorityLevelConfiguration.Name != "fusebox-node-agents" || len(r) != 1 || len(r[0].Subjects) != 1 ||
		r[0].Subjects[0].ServiceAccount == nil || *r[0].Subjects[0].ServiceAccount != (flowcontrolv1.ServiceAccountSubject{Namespace: ns, Name: "fusebox-node"}) {
		t.Errorf("FlowSchema fusebox-node-agents: level %q, rules %+v; want the release's service account %s/fusebox-node in fusebox-node-agents", agentsSchema.Spec.PriorityLevelConfiguration.Name, r, ns)
	}

	// CRDs: every one of config/crd/bases, from crds/.
	bases, _ := filepath.Glob(filepath.Join(repoRoot, "config", "crd", "bases", "*.yaml"))
	if len(bases) == 0 {
		t.Fatal("no CRDs in config/crd/bases")
	}
	for _, b := range bases {
		data, err := os.ReadFile(b)
		if err != nil {
			t.Fatal(err)
		}
		var crd unstructured.Unstructured
		if err := yaml.Unmarshal(data, &crd.Object); err != nil {
			t.Fatal(err)
		}
		if !get(t, objs, "CustomResourceDefinition", crd.GetName(), nil) {
			t.Errorf("the chart does not install the CRD %s", crd.GetName())
		}
	}
}

func TestChartNonDefaultValues(t *testing.T) {
	const ns = "platform"
	objs, err := helmTemplate(t, ns, nonDefaultValues())
	if err != nil {
		t.Fatal(err)
	}
	var dep appsv1.Deployment
	if !get(t, objs, "Deployment", "fusebox-controller-manager", &dep) {
		t.Fatal("no manager Deployment")
	}
	c := dep.Spec.Template.Spec.Containers[0]
	if c.Image != "registry.example.com/platform/fusebox:v1.2.3" || c.ImagePullPolicy != corev1.PullAlways {
		t.Errorf("image %q pull %q", c.Image, c.ImagePullPolicy)
	}
	if *dep.Spec.Replicas != 3 {
		t.Errorf("replicas %d, want 3", *dep.Spec.Replicas)
	}
	if c.Resources.Limits.Memory().String() != "256Mi" || c.Resources.Requests.Cpu().String() != "100m" {
		t.Errorf("resources %+v", c.Resources)
	}
	wantArgs(t, c.Args, "--leader-elect=false", "--metrics-secure=false", "--webhook-cert-mode=external", "--fuseboxd-image=registry.example.com/platform/fuseboxd:v1.2.3-sidecar")

	// cert-manager: its Issuer and Certificate, the Secret it writes mounted,
	// the webhook configurations asking for its CA, no self-signed RBAC.
	var cert unstructured.Unstructured
	if !get(t, objs, "Certificate", "fusebox-serving-cert", &cert.Object) || !get(t, objs, "Issuer", "fusebox-selfsigned-issuer", nil) {
		t.Fatal("cert-manager mode renders no Certificate and Issuer")
	}
	dns, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
	if len(dns) == 0 || dns[0] != "fusebox-webhook-service."+ns+".svc" {
		t.Errorf("certificate DNS names %v, want the webhook Service in %s", dns, ns)
	}
	for _, k := range []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} {
		var u unstructured.Unstructured
		get(t, objs, k, "fusebox-"+strings.ToLower(strings.TrimSuffix(k, "WebhookConfiguration"))+"-webhook-configuration", &u.Object)
		if got := u.GetAnnotations()["cert-manager.io/inject-ca-from"]; got != ns+"/fusebox-serving-cert" {
			t.Errorf("%s: inject-ca-from %q", k, got)
		}
	}
	var secretMounted bool
	for _, v := range dep.Spec.Template.Spec.Volumes {
		secretMounted = secretMounted || (v.Secret != nil && v.Secret.SecretName == "fusebox-webhook-server-cert")
	}
	if !secretMounted {
		t.Errorf("cert-manager's Secret is not mounted: %+v", dep.Spec.Template.Spec.Volumes)
	}
	if get(t, objs, "Role", "fusebox-webhook-certs", nil) || get(t, objs, "ClusterRole", "fusebox-webhook-certs", nil) {
		t.Error("cert-manager mode still grants the self-signed mode's certificate RBAC")
	}
	if get(t, objs, "ClusterRole", breakerClientRole, nil) {
		t.Error("breakerClientRole.enabled=false still renders fusebox-breaker-client")
	}
	for _, u := range objs {
		if isAdmissionPolicy(u) {
			t.Errorf("admissionPolicy.enabled=false still renders %s %s", u.GetKind(), u.GetName())
		}
		if u.GroupVersionKind().Group == "flowcontrol.apiserver.k8s.io" {
			t.Errorf("flowControl.enabled=false still renders %s %s", u.GetKind(), u.GetName())
		}
	}
}

// The admission policy value gates whatever admission policies config/
// holds: with it on, all of them are rendered.
func TestChartAdmissionPolicyValue(t *testing.T) {
	kustomized, err := render(kustomizeBin(t), filepath.Join(repoRoot, "config", "default"))
	if err != nil {
		t.Fatal(err)
	}
	var policies []string
	for _, o := range kustomized {
		u := &unstructured.Unstructured{Object: o}
		if isAdmissionPolicy(u) {
			policies = append(policies, key(o))
		}
	}
	if len(policies) == 0 {
		t.Log("config/ holds no ValidatingAdmissionPolicy yet; the value gates nothing")
	}
	on, err := helmTemplate(t, "ops", map[string]any{"admissionPolicy": map[string]any{"enabled": true}})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range policies {
		k, n, _ := strings.Cut(p, "/")
		if !get(t, on, k, n, nil) {
			t.Errorf("admissionPolicy.enabled=true does not render %s", p)
		}
	}
}

// The refusal of report writes by tokens bound to no pod is on by default, and
// admissionPolicy.refuseUnboundReportTokens=false leaves it out alone: the pod
// identity policy stays.
func TestChartRefuseUnboundReportTokensValue(t *testing.T) {
	for _, tc := range []struct {
		name string
		vals map[string]any
		want bool
	}{
		{"default", nil, true},
		{"false", map[string]any{"admissionPolicy": map[string]any{"refuseUnboundReportTokens": false}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := helmTemplate(t, "ops", tc.vals)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} {
				if got := get(t, objs, k, boundTokenPolicy, nil); got != tc.want {
					t.Errorf("%s %s rendered %v, want %v", k, boundTokenPolicy, got, tc.want)
				}
				if !get(t, objs, k, "fusebox-breakerreport-identity", nil) {
					t.Errorf("%s fusebox-breakerreport-identity is not rendered", k)
				}
			}
		})
	}
}

func TestChartRefusesAnUnknownCertMode(t *testing.T) {
	_, err := helmTemplate(t, "ops", map[string]any{"webhook": map[string]any{"certMode": "vault"}})
	if err == nil || !strings.Contains(err.Error(), "certMode") {
		t.Errorf("certMode vault: error %v, want the schema to refuse it", err)
	}
}

// sidecarBeside is the fuseboxd image the chart names by default beside the manager's
// image ref: same registry path and tag, repository fuseboxd.
func sidecarBeside(ref string) string {
	i := strings.LastIndex(ref, ":")
	return "--fuseboxd-image=" + path.Join(path.Dir(ref[:i]), "fuseboxd") + ref[i:]
}

func wantArgs(t *testing.T, args []string, want ...string) {
	t.Helper()
	have := map[string]bool{}
	for _, a := range args {
		have[a] = true
	}
	for _, w := range want {
		if !have[w] {
			t.Errorf("manager args %v lack %s", args, w)
		}
	}
}

func TestUncommentCertManager(t *testing.T) {
	in := "resources:\n- a\n## [CERTMANAGER] (resources)\n#- b\n\npatches:\n## [CERTMANAGER] x\n## more prose\n#- path: p\n#  target:\n#    name: n\n##\n# [SELFSIGNED]\ncomponents:\n- c\n"
	want := "resources:\n- a\n## [CERTMANAGER] (resources)\n- b\n\npatches:\n## [CERTMANAGER] x\n## more prose\n- path: p\n  target:\n    name: n\n##\n# [SELFSIGNED]\ncomponents:\n- c\n"
	got, n := uncommentCertManager(in)
	if got != want || n != 2 {
		t.Errorf("got %d blocks:\n%s\nwant 2:\n%s", n, got, want)
	}
}

// A ValidatingAdmissionPolicy and its binding, as config/ will hold them, are
// templated behind admissionPolicy.enabled.
func TestGenerateGatesAdmissionPolicies(t *testing.T) {
	kustomized, err := render(kustomizeBin(t), filepath.Join(repoRoot, "config", "default"))
	if err != nil {
		t.Fatal(err)
	}
	var policy, binding object
	_ = yaml.Unmarshal([]byte(`{apiVersion: admissionregistration.k8s.io/v1, kind: ValidatingAdmissionPolicy,
  metadata: {name: fusebox-breakerreport-writer},
  spec: {failurePolicy: Fail, matchConstraints: {resourceRules: [{apiGroups: [resilience.fusebox.dev], apiVersions: ["*"], operations: [CREATE, UPDATE], resources: [breakerreports]}]},
    validations: [{expression: "true"}]}}`), &policy)
	_ = yaml.Unmarshal([]byte(`{apiVersion: admissionregistration.k8s.io/v1, kind: ValidatingAdmissionPolicyBinding,
  metadata: {name: fusebox-breakerreport-writer}, spec: {policyName: fusebox-breakerreport-writer, validationActions: [Deny]}}`), &binding)
	with := append(kustomized, policy, binding)
	chart, err := generate(with, with)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"templates/validatingadmissionpolicy-breakerreport-writer.yaml", "templates/validatingadmissionpolicybinding-breakerreport-writer.yaml"} {
		if !strings.Contains(string(chart[f]), "{{- if .Values.admissionPolicy.enabled }}") {
			t.Errorf("%s is not gated by admissionPolicy.enabled:\n%s", f, chart[f])
		}
	}
	if !strings.Contains(string(chart["values.yaml"]), "ValidatingAdmissionPolicy/fusebox-breakerreport-writer") {
		t.Errorf("values.yaml does not name the policies it gates:\n%s", chart["values.yaml"])
	}
}
