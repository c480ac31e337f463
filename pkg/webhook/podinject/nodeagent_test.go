package podinject

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// The URL a nil AgentLocator gives: the default Service by DNS.
const defaultAgentURL = "http://fusebox-node.fusebox-system.svc:8476"

// admitWith runs inj on pod and returns the patched pod and the response.
func admitWith(t *testing.T, inj Injector, pod *corev1.Pod) (*corev1.Pod, []byte, admission.Response) {
	t.Helper()
	raw := mustJSON(t, pod)
	resp := inj.Handle(context.Background(), createRequest(raw))
	if !resp.Allowed {
		t.Fatalf("denied: %+v", resp.Result)
	}
	out := raw
	if len(resp.Patches) > 0 {
		out = applyPatch(t, raw, resp)
	}
	return decodePod(t, out), out, resp
}

// wiredToAgent says what is missing for c to reach the agent at url, or "".
func wiredToAgent(c corev1.Container, url string) string {
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == AgentTokenVolumeName && m.MountPath == "/var/run/fusebox/node-agent" && m.ReadOnly && m.SubPath == ""
	}) {
		return "the token's read-only mount"
	}
	want := map[string]string{
		breakerconfig.EnvNodeAgent: url, breakerconfig.EnvNodeAgentToken: breakerconfig.NodeAgentTokenPath,
		breakerconfig.EnvPodName: "fieldRef:metadata.name", breakerconfig.EnvNamespace: "fieldRef:metadata.namespace", breakerconfig.EnvPodUID: "fieldRef:metadata.uid",
	}
	for _, e := range c.Env {
		got := e.Value
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			got = "fieldRef:" + e.ValueFrom.FieldRef.FieldPath
		}
		if w, ok := want[e.Name]; ok && w == got {
			delete(want, e.Name)
		}
		if e.Name == breakerconfig.EnvConfigDir {
			return "no FUSEBOX_CONFIG_DIR (the agent streams the config)"
		}
	}
	for name := range want {
		return name
	}
	return ""
}

func hasTokenVolume(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	i := slices.IndexFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == AgentTokenVolumeName })
	if i < 0 {
		t.Fatalf("no volume %s: %+v", AgentTokenVolumeName, pod.Spec.Volumes)
	}
	p := pod.Spec.Volumes[i].Projected
	if p == nil || len(p.Sources) != 1 || p.Sources[0].ServiceAccountToken == nil {
		t.Fatalf("volume %s is %+v, want one projected service-account token", AgentTokenVolumeName, pod.Spec.Volumes[i])
	}
	tok := p.Sources[0].ServiceAccountToken
	if tok.Audience != "fusebox.dev/node-agent" || tok.ExpirationSeconds == nil || *tok.ExpirationSeconds != 600 || tok.Path != "token" {
		t.Errorf("token %+v: want audience fusebox.dev/node-agent, 600 s (the API server's minimum), file token", tok)
	}
	if slices.ContainsFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.ConfigMap != nil }) {
		t.Errorf("volumes %+v: a pod wired to the agent mounts no ConfigMap", pod.Spec.Volumes)
	}
}

// readmitted admits the stored form of out again and fails on any patch or a change of
// warnings.
func readmitted(t *testing.T, inj Injector, out []byte, warnings []string) {
	t.Helper()
	stored := decodePod(t, out)
	asStored(stored)
	resp := inj.Handle(context.Background(), createRequest(mustJSON(t, stored)))
	if !resp.Allowed || len(resp.Patches) != 0 || !slices.Equal(resp.Warnings, warnings) {
		t.Errorf("second admission: allowed %v patches %s warnings %q, want none and %q", resp.Allowed, mustJSON(t, resp.Patches), resp.Warnings, warnings)
	}
}

// TestNodeAgentAnnotation: a pod annotated fusebox.dev/node-agent: "true" is wired to the
// agent in every container and sidecar init container, not in plain init containers,
// with the token volume and no ConfigMap; admitting the result again patches nothing.
func TestNodeAgentAnnotation(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	in := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{resiliencev1alpha1.AnnotationNodeAgent: "true"}},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "migrate"}, {Name: "proxy", RestartPolicy: &always}},
			Containers:     []corev1.Container{{Name: "app", Env: []corev1.EnvVar{{Name: "LOG_LEVEL", Value: "info"}}}, {Name: "worker"}},
			// As the API server's ServiceAccount admission names it, before any webhook.
			ServiceAccountName: "default",
		},
	}
	for _, inj := range []Injector{{}, {NamespaceOptedIn: true}} {
		pod, out, resp := admitWith(t, inj, in)
		if len(resp.Warnings) != 0 {
			t.Errorf("warnings %q", resp.Warnings)
		}
		hasTokenVolume(t, pod)
		for _, c := range []corev1.Container{pod.Spec.Containers[0], pod.Spec.Containers[1], pod.Spec.InitContainers[1]} {
			if missing := wiredToAgent(c, defaultAgentURL); missing != "" {
				t.Errorf("%s: %s: %+v", c.Name, missing, c)
			}
		}
		if c := pod.Spec.InitContainers[0]; len(c.Env) != 0 || len(c.VolumeMounts) != 0 {
			t.Errorf("plain init container wired: %+v", c)
		}
		if e := pod.Spec.Containers[0].Env; e[0].Name != "LOG_LEVEL" || len(e) != 6 {
			t.Errorf("app env %+v: want LOG_LEVEL first, then Fusebox's five", e)
		}
		readmitted(t, inj, out, nil)
	}
}

// TestNodeAgentNamespace: the handler of a labelled namespace wires every pod but one
// annotated "false"; the other handler wires none without the annotation. A value that
// means nothing is named in a warning, and the namespace decides.
func TestNodeAgentNamespace(t *testing.T) {
	for _, tc := range []struct {
		namespace  bool
		annotation string // "" for none
		wired      bool
		warning    string
	}{
		{true, "", true, ""},
		{true, "true", true, ""},
		{true, "false", false, ""},
		{false, "", false, ""},
		{false, "false", false, ""},
		{true, "yes", true, `fusebox: annotation fusebox.dev/node-agent is "yes"; only "true" (and "false", in a namespace labelled fusebox.dev/node-agent=enabled) means something, so the namespace decides`},
		{false, "yes", false, `fusebox: annotation fusebox.dev/node-agent is "yes"; only "true" (and "false", in a namespace labelled fusebox.dev/node-agent=enabled) means something, so the namespace decides`},
	} {
		in := &corev1.Pod{Spec: corev1.PodSpec{ServiceAccountName: "default", Containers: []corev1.Container{{Name: "app"}}}}
		if tc.annotation != "" {
			in.Annotations = map[string]string{resiliencev1alpha1.AnnotationNodeAgent: tc.annotation}
		}
		pod, _, resp := admitWith(t, Injector{NamespaceOptedIn: tc.namespace}, in)
		if got := wiredToAgent(pod.Spec.Containers[0], defaultAgentURL) == ""; got != tc.wired {
			t.Errorf("namespace %v annotation %q: wired %v, want %v", tc.namespace, tc.annotation, got, tc.wired)
		}
		if !tc.wired && len(resp.Patches) != 0 {
			t.Errorf("namespace %v annotation %q: patched %s", tc.namespace, tc.annotation, mustJSON(t, resp.Patches))
		}
		if strings.Join(resp.Warnings, "\n") != tc.warning {
			t.Errorf("namespace %v annotation %q: warnings %q, want %q", tc.namespace, tc.annotation, resp.Warnings, tc.warning)
		}
	}
}

// TestNodeAgentWithInject: the agent's wiring replaces the ConfigMap's, whatever
// fusebox.dev/inject says.
func TestNodeAgentWithInject(t *testing.T) {
	pod := annotated(corev1.Container{Name: "app"})
	pod.Annotations[resiliencev1alpha1.AnnotationNodeAgent] = "true"
	pod.Spec.ServiceAccountName = "default"
	got, out, _ := admitWith(t, Injector{}, pod)
	hasTokenVolume(t, got)
	if missing := wiredToAgent(got.Spec.Containers[0], defaultAgentURL); missing != "" {
		t.Errorf("app: %s: %+v", missing, got.Spec.Containers[0])
	}
	readmitted(t, Injector{}, out, nil)
}

// TestNodeAgentSidecar: with the sidecar, the sidecar talks to the agent; the
// application's containers get only the socket, and the agent's wiring too with
// fusebox.dev/inject.
func TestNodeAgentSidecar(t *testing.T) {
	for _, inject := range []bool{false, true} {
		annotations := map[string]string{SidecarAnnotation: "true", resiliencev1alpha1.AnnotationNodeAgent: "true"}
		if inject {
			annotations[resiliencev1alpha1.AnnotationInject] = "true"
		}
		in := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: annotations}, Spec: corev1.PodSpec{ServiceAccountName: "default", Containers: []corev1.Container{{Name: "php-fpm"}}}}
		pod, out, resp := admitWith(t, Injector{}, in)
		if len(resp.Warnings) != 0 {
			t.Errorf("warnings %q", resp.Warnings)
		}
		hasTokenVolume(t, pod)
		sc := pod.Spec.InitContainers[0]
		if sc.Name != SidecarName {
			t.Fatalf("init containers %+v", pod.Spec.InitContainers)
		}
		if missing := wiredToAgent(sc, defaultAgentURL); missing != "" {
			t.Errorf("sidecar: %s: %+v", missing, sc)
		}
		if !slices.ContainsFunc(sc.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == SocketVolumeName && m.MountPath == SocketDir }) {
			t.Errorf("sidecar mounts %+v: no socket", sc.VolumeMounts)
		}
		app := pod.Spec.Containers[0]
		if got := wiredToAgent(app, defaultAgentURL) == ""; got != inject {
			t.Errorf("inject=%v: application wired to the agent: %v (%+v)", inject, got, app)
		}
		readmitted(t, Injector{}, out, nil)
	}
}

// TestNodeAgentKeepsWhatThePodHas: the pod's own token volume, mount or variable of
// Fusebox's names is kept and named in a warning, on every admission.
func TestNodeAgentKeepsWhatThePodHas(t *testing.T) {
	in := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{resiliencev1alpha1.AnnotationNodeAgent: "true"}},
		Spec: corev1.PodSpec{
			ServiceAccountName: "default",
			Volumes:            []corev1.Volume{{Name: AgentTokenVolumeName, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			Containers: []corev1.Container{
				{Name: "app", Env: []corev1.EnvVar{{Name: breakerconfig.EnvNodeAgent, Value: "http://127.0.0.1:9999"}}},
				{Name: "worker", VolumeMounts: []corev1.VolumeMount{{Name: "x", MountPath: "/var/run/fusebox/node-agent/"}}},
			},
		},
	}
	want := []string{
		`fusebox: kept the pod's own volume "fusebox-node-agent-token", which is not a service-account token for fusebox.dev/node-agent; it is what /var/run/fusebox/node-agent mounts`,
		`fusebox: container "app": kept its own environment variable FUSEBOX_NODE_AGENT`,
		`fusebox: container "worker": kept its own volume mount at /var/run/fusebox/node-agent (volume "x")`,
	}
	pod, out, resp := admitWith(t, Injector{}, in)
	if !slices.Equal(resp.Warnings, want) {
		t.Errorf("warnings:\n%q\nwant:\n%q", resp.Warnings, want)
	}
	if pod.Spec.Volumes[0].EmptyDir == nil || len(pod.Spec.Volumes) != 1 {
		t.Errorf("volumes %+v: the pod's own was replaced or another added", pod.Spec.Volumes)
	}
	if e := pod.Spec.Containers[0].Env; e[0].Value != "http://127.0.0.1:9999" {
		t.Errorf("app env %+v", e)
	}
	readmitted(t, Injector{}, out, want)
}

// TestNodeAgentNeedsAServiceAccount: a pod without a service account (the API server's
// ServiceAccount admission off) would be refused with a projected token; it is not
// wired to the agent, and the warning says why. With the sidecar, the sidecar is wired
// to the ConfigMap instead.
func TestNodeAgentNeedsAServiceAccount(t *testing.T) {
	const warning = "fusebox: the pod has no serviceAccountName, which its token for the node agent needs, so it is not wired to the agent"
	for _, sidecar := range []bool{false, true} {
		annotations := map[string]string{resiliencev1alpha1.AnnotationNodeAgent: "true"}
		if sidecar {
			annotations[SidecarAnnotation] = "true"
		}
		in := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: annotations}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}}}
		pod, _, resp := admitWith(t, Injector{}, in)
		if !slices.Equal(resp.Warnings, []string{warning}) {
			t.Errorf("sidecar %v: warnings %q, want %q", sidecar, resp.Warnings, warning)
		}
		if slices.ContainsFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Projected != nil }) {
			t.Errorf("sidecar %v: volumes %+v, want no projected token", sidecar, pod.Spec.Volumes)
		}
		if !sidecar && len(resp.Patches) != 0 {
			t.Errorf("patched %s", mustJSON(t, resp.Patches))
		}
		if sidecar && (len(pod.Spec.InitContainers) != 1 || !slices.ContainsFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.ConfigMap != nil })) {
			t.Errorf("with the sidecar: init containers %+v volumes %+v, want the sidecar on the ConfigMap", pod.Spec.InitContainers, pod.Spec.Volumes)
		}
	}
}

// TestAgentLocatorNil: with no locator, the default Service by its DNS name.
func TestAgentLocatorNil(t *testing.T) {
	var l *AgentLocator
	if url, warning := l.URL(context.Background()); url != defaultAgentURL || warning != "" {
		t.Errorf("nil locator: %q, %q", url, warning)
	}
}
