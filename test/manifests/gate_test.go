package manifests

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/fusebox-dev/fusebox/internal/gateserver"
)

// config/default serves the rollout gate on the manager's gate port behind the
// fusebox-gate Service, and ships a role for its callers that grants what the gate asks
// the API server about and nothing else (docs/rollouts.md).
func TestDefaultServesTheGate(t *testing.T) {
	objs := kustomizeBuild(t, "config/default")

	var dep appsv1.Deployment
	find(t, objs, "Deployment", "fusebox-controller-manager", &dep)
	c := dep.Spec.Template.Spec.Containers[0]
	bind := ""
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--gate-bind-address="); ok {
			bind = v
		}
	}
	if bind != gateserver.DefaultBindAddress {
		t.Errorf("manager args %q: want --gate-bind-address=%s", c.Args, gateserver.DefaultBindAddress)
	}
	var port *corev1.ContainerPort
	for i := range c.Ports {
		if c.Ports[i].Name == "gate" {
			port = &c.Ports[i]
		}
	}
	if port == nil || ":"+strconv.Itoa(int(port.ContainerPort)) != bind {
		t.Errorf("manager ports %+v: want one named gate on %s", c.Ports, bind)
	}

	var svc corev1.Service
	find(t, objs, "Service", "fusebox-gate", &svc)
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.StrVal != "gate" || svc.Spec.Ports[0].Port != 8444 {
		t.Errorf("gate Service ports %+v, want 8444 targeting the manager's gate port", svc.Spec.Ports)
	}
	for k, v := range svc.Spec.Selector {
		if dep.Spec.Template.Labels[k] != v {
			t.Errorf("gate Service selects %s=%s, which the manager's pods do not carry", k, v)
		}
	}

	var reader rbacv1.ClusterRole
	find(t, objs, "ClusterRole", "fusebox-gate-reader", &reader)
	if len(reader.Rules) != 1 || strings.Join(reader.Rules[0].Resources, ",") != "circuitbreakers" ||
		strings.Join(reader.Rules[0].Verbs, ",") != "get" || strings.Join(reader.Rules[0].APIGroups, ",") != "resilience.fusebox.dev" {
		t.Errorf("gate-reader grants %+v, want get on circuitbreakers only", reader.Rules)
	}
}

// The samples of examples/rollouts ask the gate the config/ deploys, on its path, with
// the role config/ ships; test/cluster runs them with the real Argo Rollouts controller.
func TestRolloutSamplesAskTheDeployedGate(t *testing.T) {
	objs := kustomizeBuild(t, "config/default")
	var svc corev1.Service
	find(t, objs, "Service", "fusebox-gate", &svc)
	base := fmt.Sprintf("https://%s.%s.svc:%d", svc.Name, svc.Namespace, svc.Spec.Ports[0].Port)
	// Path's shape, its parameters any segment: the samples fill them in their own ways.
	segments := strings.Split(gateserver.Path, "/")
	for i, seg := range segments {
		if strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}") {
			segments[i] = `[^/?]+`
		} else {
			segments[i] = regexp.QuoteMeta(seg)
		}
	}
	shape := regexp.MustCompile("^" + strings.Join(segments, "/") + `(\?|$)`)
	asksTheGate := func(url string) bool {
		rest, ok := strings.CutPrefix(url, base)
		return ok && shape.MatchString(rest)
	}

	samples := map[string][]*unstructured.Unstructured{}
	for _, f := range []string{"analysistemplate.yaml", "rollout.yaml", "flagger-canary.yaml", "gate-access.yaml"} {
		data, err := os.ReadFile(filepath.Join("..", "..", "examples", "rollouts", f))
		if err != nil {
			t.Fatal(err)
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			samples[f] = append(samples[f], u)
		}
	}

	template := samples["analysistemplate.yaml"][0]
	args, _, _ := unstructured.NestedSlice(template.Object, "spec", "args")
	gateArg := ""
	for _, a := range args {
		if m := a.(map[string]any); m["name"] == "gate" {
			gateArg, _ = m["value"].(string)
		}
	}
	if gateArg != base {
		t.Errorf("the AnalysisTemplate's gate argument is %q, want the deployed Service, %q", gateArg, base)
	}
	metrics, _, _ := unstructured.NestedSlice(template.Object, "spec", "metrics")
	web, _, _ := unstructured.NestedMap(metrics[0].(map[string]any), "provider", "web")
	url, _ := web["url"].(string)
	if !asksTheGate(strings.Replace(url, "{{args.gate}}", base, 1)) {
		t.Errorf("the AnalysisTemplate asks %q, want the gate's path %s", url, gateserver.Path)
	}
	for _, want := range []string{"revision={{args.revision}}", "baseline={{args.baseline}}"} {
		if !strings.Contains(url, want) {
			t.Errorf("the AnalysisTemplate's URL %q lacks %s", url, want)
		}
	}

	canary := samples["flagger-canary.yaml"][0]
	hooks, _, _ := unstructured.NestedSlice(canary.Object, "spec", "analysis", "webhooks")
	hookURL, _ := hooks[0].(map[string]any)["url"].(string)
	if !asksTheGate(hookURL) {
		t.Errorf("the Flagger webhook calls %q, want the gate %s%s", hookURL, base, gateserver.Path)
	}

	var reader rbacv1.ClusterRole
	find(t, objs, "ClusterRole", "fusebox-gate-reader", &reader)
	for _, u := range samples["gate-access.yaml"] {
		if u.GetKind() == "RoleBinding" {
			if name, _, _ := unstructured.NestedString(u.Object, "roleRef", "name"); name != reader.Name {
				t.Errorf("gate-access.yaml binds %q, want %q", name, reader.Name)
			}
		}
	}
}
