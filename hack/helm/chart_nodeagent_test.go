package main

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// With nodeAgent.enabled the chart deploys exactly what config/default deploys, the
// DaemonSet as config/nodeagent has it; without, none of the node agent. Its values
// reach the DaemonSet.
func TestChartNodeAgent(t *testing.T) {
	const ns = "ops"
	kustomized, err := render(kustomizeBin(t), filepath.Join(repoRoot, "config", "default"))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := helmTemplate(t, ns, map[string]any{"nodeAgent": map[string]any{"enabled": true}})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range kustomized {
		if kind(o) != "Namespace" && !get(t, objs, kind(o), name(o), nil) {
			t.Errorf("nodeAgent.enabled: config/default deploys %s, the chart does not", key(o))
		}
	}
	if len(objs) != len(kustomized)-1 {
		t.Errorf("nodeAgent.enabled: the chart renders %d objects, config/default %d besides its Namespace", len(objs), len(kustomized)-1)
	}
	var ds, want appsv1.DaemonSet
	if !get(t, objs, "DaemonSet", "fusebox-node", &ds) {
		t.Fatal("nodeAgent.enabled renders no DaemonSet fusebox-node")
	}
	for _, o := range kustomized {
		if kind(o) == "DaemonSet" {
			_ = runtime.DefaultUnstructuredConverter.FromUnstructured(o, &want)
		}
	}
	if ds.Namespace != ns {
		t.Errorf("DaemonSet in %q, want the release's %q", ds.Namespace, ns)
	}
	got, wc := ds.Spec.Template.Spec, want.Spec.Template.Spec
	c := got.Containers[0]
	if c.Image != wc.Containers[0].Image || !reflect.DeepEqual(c.Resources, wc.Containers[0].Resources) ||
		!reflect.DeepEqual(got.Tolerations, wc.Tolerations) || got.PriorityClassName != "" || c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("DaemonSet: image %q resources %+v tolerations %+v priority %q pull %q; config/default: %q %+v %+v, none, and IfNotPresent",
			c.Image, c.Resources, got.Tolerations, got.PriorityClassName, c.ImagePullPolicy, wc.Containers[0].Image, wc.Containers[0].Resources, wc.Tolerations)
	}
	if !reflect.DeepEqual(ds.Spec.Template.Spec.SecurityContext, want.Spec.Template.Spec.SecurityContext) ||
		!reflect.DeepEqual(c.SecurityContext, wc.Containers[0].SecurityContext) || !reflect.DeepEqual(ds.Spec.UpdateStrategy, want.Spec.UpdateStrategy) {
		t.Error("the chart's DaemonSet differs from config/nodeagent's in its security context or update strategy")
	}
	var svc corev1.Service
	if !get(t, objs, "Service", "fusebox-node", &svc) || svc.Spec.InternalTrafficPolicy == nil || *svc.Spec.InternalTrafficPolicy != corev1.ServiceInternalTrafficPolicyLocal {
		t.Errorf("Service fusebox-node %+v: want internalTrafficPolicy Local", svc.Spec)
	}
	var binding rbacv1.ClusterRoleBinding
	if !get(t, objs, "ClusterRoleBinding", "fusebox-node", &binding) || len(binding.Subjects) != 1 ||
		binding.Subjects[0].Namespace != ns || binding.Subjects[0].Name != "fusebox-node" {
		t.Errorf("ClusterRoleBinding fusebox-node binds %+v, want the release's fusebox-node service account", binding.Subjects)
	}

	// The sidecar's image, wherever it is, is the agent's by default.
	objs, err = helmTemplate(t, ns, map[string]any{
		"nodeAgent": map[string]any{"enabled": true},
		"fuseboxd":  map[string]any{"image": map[string]any{"repository": "registry.example.com/fuseboxd", "tag": "v9"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	get(t, objs, "DaemonSet", "fusebox-node", &ds)
	if img := ds.Spec.Template.Spec.Containers[0].Image; img != "registry.example.com/fuseboxd:v9" {
		t.Errorf("fuseboxd.image set, nodeAgent.image not: the agent runs %q, want the sidecar's registry.example.com/fuseboxd:v9", img)
	}

	// Every value of its own.
	objs, err = helmTemplate(t, ns, nonDefaultValues())
	if err != nil {
		t.Fatal(err)
	}
	get(t, objs, "DaemonSet", "fusebox-node", &ds)
	p := ds.Spec.Template.Spec
	c = p.Containers[0]
	if c.Image != "registry.example.com/platform/fuseboxd-node:v1.2.3-node" || c.ImagePullPolicy != corev1.PullAlways {
		t.Errorf("image %q pull %q", c.Image, c.ImagePullPolicy)
	}
	// Helm merges a map of values into the default's: the CPU limit stays.
	if c.Resources.Limits.Memory().String() != "512Mi" || c.Resources.Requests.Cpu().String() != "50m" || c.Resources.Limits.Cpu().String() != "500m" {
		t.Errorf("resources %+v", c.Resources)
	}
	if len(p.Tolerations) != 1 || p.Tolerations[0].Key != "dedicated" || p.PriorityClassName != "system-node-critical" {
		t.Errorf("tolerations %+v priority %q", p.Tolerations, p.PriorityClassName)
	}

	// Off: nothing of the agent, and the pod webhook's read of its Service stays.
	objs, err = helmTemplate(t, ns, map[string]any{"nodeAgent": map[string]any{"enabled": false}})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range objs {
		if u.GetLabels()[componentLabel] == nodeAgentComponent {
			t.Errorf("nodeAgent.enabled=false renders %s %s", u.GetKind(), u.GetName())
		}
	}
	if !get(t, objs, "Role", "fusebox-pod-webhook", nil) {
		t.Error("no Role fusebox-pod-webhook: the pod webhook reads the agent's Service whether or not the chart installs it")
	}
}

func TestChartRefusesBadNodeAgentValues(t *testing.T) {
	for _, v := range []map[string]any{
		{"enabled": "yes"},
		{"tolerations": map[string]any{"operator": "Exists"}},
		{"image": map[string]any{"pullPolicy": "Sometimes"}},
	} {
		if _, err := helmTemplate(t, "ops", map[string]any{"nodeAgent": v}); err == nil || !strings.Contains(err.Error(), "nodeAgent") {
			t.Errorf("nodeAgent %v: error %v, want the schema to refuse it", v, err)
		}
	}
}
