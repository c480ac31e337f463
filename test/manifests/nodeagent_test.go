package manifests

import (
	"reflect"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	psaapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/webhook/podinject"
)

// restricted fails t unless the pod template meets Pod Security's restricted level as
// the API server's own admission judges it (the evaluator kube-apiserver runs, at the
// version of the envtest control plane).
func restricted(t *testing.T, what string, tmpl corev1.PodTemplateSpec) {
	t.Helper()
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	lv := psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.LatestVersion()}
	for _, r := range eval.EvaluatePod(lv, &tmpl.ObjectMeta, &tmpl.Spec) {
		if !r.Allowed {
			t.Errorf("%s does not meet Pod Security restricted: %s: %s", what, r.ForbiddenReason, r.ForbiddenDetail)
		}
	}
}

// The node agent (config/nodeagent): its identity, exactly the permissions docs/rbac.md
// lists, a DaemonSet that meets restricted and needs nothing of the host, and the
// node-local Service the pod webhook points pods at.
func TestDefaultDeploysTheNodeAgent(t *testing.T) {
	objs := kustomizeBuild(t, "config/default")
	const ns, name = "fusebox-system", "fusebox-node"

	var sa corev1.ServiceAccount
	find(t, objs, "ServiceAccount", name, &sa)
	if sa.Namespace != ns {
		t.Errorf("ServiceAccount in %q", sa.Namespace)
	}
	var role rbacv1.ClusterRole
	find(t, objs, "ClusterRole", name, &role)
	want := map[string]map[string][]string{
		"authentication.k8s.io/tokenreviews":       {"create": nil},
		"authentication.k8s.io/selfsubjectreviews": {"create": nil},
		"/pods":       {"get": nil, "list": nil, "watch": nil},
		"/configmaps": {"get": {breakerconfig.ConfigMapName}, "list": {breakerconfig.ConfigMapName}, "watch": {breakerconfig.ConfigMapName}},
		breakerconfig.Group + "/" + breakerconfig.NodeReportResource: {
			"get": nil, "list": nil, "watch": nil, "create": nil, "update": nil, "delete": nil,
		},
	}
	got := map[string]map[string][]string{}
	for _, r := range role.Rules {
		if len(r.NonResourceURLs) > 0 {
			t.Errorf("the node agent's role grants non-resource URLs: %+v", r)
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				got[g+"/"+res] = grants(role.Rules, g, res)
			}
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("the node agent's role grants\n%v\nwant exactly\n%v", got, want)
	}
	// The readers of GET /v1/pods: their account, and the Role a person is bound to.
	var reader corev1.ServiceAccount
	find(t, objs, "ServiceAccount", breakerconfig.NodeAgentReaderName, &reader)
	var readerRole rbacv1.Role
	find(t, objs, "Role", breakerconfig.NodeAgentReaderName, &readerRole)
	wantReader := map[string]map[string][]string{
		"/serviceaccounts/token": {"create": {breakerconfig.NodeAgentReaderName}},
		"/pods/proxy":            {"get": nil},
		"/pods":                  {"list": nil},
	}
	gotReader := map[string]map[string][]string{}
	for _, r := range readerRole.Rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				gotReader[g+"/"+res] = grants(readerRole.Rules, g, res)
			}
		}
	}
	if reader.Namespace != ns || readerRole.Namespace != ns || !reflect.DeepEqual(gotReader, wantReader) {
		t.Errorf("reader account in %q, Role in %q granting\n%v\nwant both in %s, exactly\n%v", reader.Namespace, readerRole.Namespace, gotReader, ns, wantReader)
	}
	var binding rbacv1.ClusterRoleBinding
	find(t, objs, "ClusterRoleBinding", name, &binding)
	if binding.RoleRef.Name != name || len(binding.Subjects) != 1 ||
		binding.Subjects[0] != (rbacv1.Subject{Kind: "ServiceAccount", Name: name, Namespace: ns}) {
		t.Errorf("binding %+v, want ClusterRole %s bound to the service account %s/%s alone", binding, name, ns, name)
	}

	var ds appsv1.DaemonSet
	find(t, objs, "DaemonSet", name, &ds)
	agentLabels := map[string]string{"app.kubernetes.io/name": "fusebox", "app.kubernetes.io/component": "node-agent"}
	if ds.Namespace != ns || !reflect.DeepEqual(ds.Spec.Selector.MatchLabels, agentLabels) ||
		!labels.SelectorFromSet(agentLabels).Matches(labels.Set(ds.Spec.Template.Labels)) {
		t.Errorf("DaemonSet in %q selects %v, template labels %v: want %v, which the operator finds agent pods by", ds.Namespace, ds.Spec.Selector, ds.Spec.Template.Labels, agentLabels)
	}
	pod := ds.Spec.Template.Spec
	restricted(t, "the node agent's pod", ds.Spec.Template)
	if pod.ServiceAccountName != name || pod.HostNetwork || pod.HostPID || pod.HostIPC {
		t.Errorf("pod: service account %q, host network %v, PID %v, IPC %v", pod.ServiceAccountName, pod.HostNetwork, pod.HostPID, pod.HostIPC)
	}
	for _, v := range pod.Volumes {
		t.Errorf("the agent needs no volume, has %+v", v)
	}
	if !slices.Contains(pod.Tolerations, corev1.Toleration{Operator: corev1.TolerationOpExists}) {
		t.Errorf("tolerations %+v: want every taint tolerated, so every node a pod can land on has an agent", pod.Tolerations)
	}
	if s := ds.Spec.UpdateStrategy; s.Type != appsv1.RollingUpdateDaemonSetStrategyType || s.RollingUpdate == nil ||
		s.RollingUpdate.MaxSurge == nil || s.RollingUpdate.MaxSurge.IntValue() != 0 || s.RollingUpdate.MaxUnavailable == nil {
		t.Errorf("update strategy %+v: want a rolling update that never runs two agents on one node", s)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("containers %+v, want the agent alone", pod.Containers)
	}
	c := pod.Containers[0]
	if c.Name != "agent" || c.Image != podinject.DefaultSidecarImage || !slices.Equal(c.Args, []string{"node", "--metrics-bind-address=:8477"}) {
		t.Errorf("container %q image %q args %v: want agent, fuseboxd (the Makefile's FUSEBOXD_IMG), node with its metrics on :8477", c.Name, c.Image, c.Args)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			env[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	if wantEnv := map[string]string{"NODE_NAME": "spec.nodeName", "POD_NAMESPACE": "metadata.namespace", "POD_NAME": "metadata.name", "POD_UID": "metadata.uid"}; !reflect.DeepEqual(env, wantEnv) {
		t.Errorf("downward-API environment %v, want %v", env, wantEnv)
	}
	if len(c.Ports) != 2 || c.Ports[0].Name != "agent" || c.Ports[0].ContainerPort != breakerconfig.NodeAgentPort || c.Ports[0].HostPort != 0 ||
		c.Ports[1].Name != "metrics" || c.Ports[1].ContainerPort != 8477 || c.Ports[1].HostPort != 0 || !slices.Contains(c.Args, "--metrics-bind-address=:8477") {
		t.Errorf("ports %+v, args %v: want %d named agent and 8477 named metrics, served by --metrics-bind-address=:8477, no host port", c.Ports, c.Args, breakerconfig.NodeAgentPort)
	}
	for probe, path := range map[*corev1.Probe]string{c.ReadinessProbe: "/readyz", c.LivenessProbe: "/healthz"} {
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != path || probe.HTTPGet.Port.StrVal != "agent" {
			t.Errorf("probe %+v: want GET %s on the agent port", probe, path)
		}
	}
	r := c.Resources
	if r.Requests.Cpu().IsZero() || r.Requests.Memory().IsZero() || r.Limits.Memory().IsZero() || r.Limits.Memory().Cmp(*r.Requests.Memory()) < 0 {
		t.Errorf("resources %+v: want CPU and memory requests and a memory limit above the request", r)
	}
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("container security context %+v: want a read-only root", sc)
	}

	var svc corev1.Service
	find(t, objs, "Service", podinject.DefaultAgentService, &svc)
	if svc.Namespace != ns || svc.Spec.InternalTrafficPolicy == nil || *svc.Spec.InternalTrafficPolicy != corev1.ServiceInternalTrafficPolicyLocal {
		t.Errorf("Service %s/%s: internalTrafficPolicy %v, want Local: a pod must reach its own node's agent", svc.Namespace, svc.Name, svc.Spec.InternalTrafficPolicy)
	}
	if !reflect.DeepEqual(svc.Spec.Selector, agentLabels) {
		t.Errorf("Service selects %v, want the agent pods (%v)", svc.Spec.Selector, agentLabels)
	}
	if p := svc.Spec.Ports; len(p) != 1 || p[0].Port != breakerconfig.NodeAgentPort || p[0].TargetPort.StrVal != "agent" || p[0].Protocol != corev1.ProtocolTCP {
		t.Errorf("Service ports %+v, want %d to the agent port", p, breakerconfig.NodeAgentPort)
	}
	// The other Services select the manager alone.
	for _, s := range []string{"fusebox-webhook-service", "fusebox-controller-manager-metrics-service"} {
		var other corev1.Service
		find(t, objs, "Service", s, &other)
		if labels.SelectorFromSet(other.Spec.Selector).Matches(labels.Set(ds.Spec.Template.Labels)) {
			t.Errorf("Service %s selects the agent pods", s)
		}
	}
}

// The operator's own pods meet restricted too, so its namespace may enforce it.
func TestDefaultManagerMeetsRestricted(t *testing.T) {
	objs := kustomizeBuild(t, "config/default")
	var dep appsv1.Deployment
	find(t, objs, "Deployment", "fusebox-controller-manager", &dep)
	restricted(t, "the manager's pod", dep.Spec.Template)
}
