package podinject

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// TestSidecar: fusebox.dev/sidecar: "true" adds fuseboxd as the first init container,
// a native sidecar with the pod's identity, the mounted config and small requests, and
// mounts the socket's emptyDir in every container; admitting the result again patches
// nothing. With fusebox.dev/inject too, the application's containers also get the config.
func TestSidecar(t *testing.T) {
	for _, both := range []bool{false, true} {
		annotations := map[string]string{SidecarAnnotation: "true"}
		if both {
			annotations[resiliencev1alpha1.AnnotationInject] = "true"
		}
		always := corev1.ContainerRestartPolicyAlways
		in := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Annotations: annotations},
			Spec: corev1.PodSpec{
				InitContainers: []corev1.Container{{Name: "migrate"}, {Name: "proxy", RestartPolicy: &always}},
				Containers:     []corev1.Container{{Name: "php-fpm"}, {Name: "worker"}},
			},
		}
		out, resp := admit(t, mustJSON(t, in))
		if len(resp.Warnings) != 0 {
			t.Errorf("warnings: %q", resp.Warnings)
		}
		pod := decodePod(t, out)
		if n := len(pod.Spec.InitContainers); n != 3 || pod.Spec.InitContainers[0].Name != SidecarName {
			t.Fatalf("init containers %+v, want fuseboxd first of 3", pod.Spec.InitContainers)
		}
		sc := pod.Spec.InitContainers[0]
		if sc.RestartPolicy == nil || *sc.RestartPolicy != corev1.ContainerRestartPolicyAlways || sc.Image != DefaultSidecarImage {
			t.Errorf("sidecar %+v: want restartPolicy Always and the default image", sc)
		}
		// The default image is :latest, whose implied pull policy (Always) would refuse an
		// image loaded onto the node by hand (issue 35).
		if sc.ImagePullPolicy != corev1.PullIfNotPresent {
			t.Errorf("sidecar pull policy %q, want IfNotPresent", sc.ImagePullPolicy)
		}
		hasInjected(t, "sidecar", sc)
		if !slices.Equal(sc.Args, []string{"serve", "--socket", SocketDir + "/fusebox.sock"}) {
			t.Errorf("sidecar args %q: want fuseboxd serve on the socket", sc.Args)
		}
		if pr := sc.StartupProbe; pr == nil || pr.Exec == nil || !slices.Equal(pr.Exec.Command, []string{SidecarBinary, "probe", "--socket", SocketDir + "/fusebox.sock"}) {
			t.Errorf("sidecar startup probe %+v: want fuseboxd probe on the socket", pr)
		}
		if sc.Resources.Requests.Memory().String() != "32Mi" || sc.Resources.Requests.Cpu().String() != "10m" || sc.Resources.Limits != nil {
			t.Errorf("sidecar resources %+v, want requests 10m and 32Mi, no limits", sc.Resources)
		}
		socket := func(c corev1.Container) bool {
			return slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
				return m.Name == SocketVolumeName && m.MountPath == SocketDir
			})
		}
		for _, c := range append([]corev1.Container{sc, pod.Spec.InitContainers[2]}, pod.Spec.Containers...) {
			if !socket(c) {
				t.Errorf("%s: no socket mount: %+v", c.Name, c.VolumeMounts)
			}
		}
		if socket(pod.Spec.InitContainers[1]) {
			t.Error("a plain init container, which runs before the sidecar serves, got the socket")
		}
		if !slices.ContainsFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == SocketVolumeName && v.EmptyDir != nil }) ||
			!slices.ContainsFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == VolumeName && v.ConfigMap != nil }) || len(pod.Spec.Volumes) != 2 {
			t.Errorf("volumes %+v, want the socket's emptyDir and the config", pod.Spec.Volumes)
		}
		if got := slices.ContainsFunc(pod.Spec.Containers[0].Env, func(e corev1.EnvVar) bool { return e.Name == "POD_NAME" }); got != both {
			t.Errorf("with inject=%v the application's container has POD_NAME: %v", both, got)
		}
		again, resp := admit(t, out)
		if len(resp.Patches) != 0 || string(again) != string(out) {
			t.Errorf("second admission patched %s", mustJSON(t, resp.Patches))
		}
	}
}

// TestSidecarImage: the Injector's image is the sidecar's.
func TestSidecarImage(t *testing.T) {
	ops, _ := PlanSidecar(&corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a"}}}}, "registry.example/fuseboxd:v1")
	last := ops[len(ops)-1]
	c, ok := last.Value.([]corev1.Container)
	if last.Path != "/spec/initContainers" || !ok || c[0].Image != "registry.example/fuseboxd:v1" {
		t.Fatalf("last operation %+v, want the init containers with the given image", last)
	}
}

// TestSidecarMeetsRestricted: the injected container carries, on its own, every field
// Pod Security's restricted level checks, so a pod that meets it still does; and a
// read-only root filesystem. (pkg/webhook's envtest suite has the API server judge it.)
func TestSidecarMeetsRestricted(t *testing.T) {
	ops, _ := PlanSidecar(&corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a"}}}}, "")
	sc := ops[len(ops)-1].Value.([]corev1.Container)[0]
	s := sc.SecurityContext
	if s == nil {
		t.Fatal("no securityContext")
	}
	switch {
	case s.RunAsNonRoot == nil || !*s.RunAsNonRoot, s.RunAsUser == nil || *s.RunAsUser != 65532, s.RunAsGroup == nil || *s.RunAsGroup != 65532:
		t.Errorf("runAsNonRoot %v runAsUser %v runAsGroup %v: want true and the image's nonroot 65532", s.RunAsNonRoot, s.RunAsUser, s.RunAsGroup)
	case s.AllowPrivilegeEscalation == nil || *s.AllowPrivilegeEscalation || s.Privileged != nil:
		t.Errorf("allowPrivilegeEscalation %v privileged %v", s.AllowPrivilegeEscalation, s.Privileged)
	case s.Capabilities == nil || !slices.Equal(s.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(s.Capabilities.Add) != 0:
		t.Errorf("capabilities %+v, want all dropped", s.Capabilities)
	case s.SeccompProfile == nil || s.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Errorf("seccomp %+v", s.SeccompProfile)
	case s.ReadOnlyRootFilesystem == nil || !*s.ReadOnlyRootFilesystem:
		t.Error("root filesystem writable")
	}
}

// TestSidecarNameTaken: a container or a plain init container named fuseboxd is refused
// with a message that names the fix (the API server's own refusal, a duplicate name,
// names neither Fusebox nor the fix); a native sidecar of that name is the pod's own,
// left alone.
func TestSidecarNameTaken(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	for _, tc := range []struct {
		name   string
		spec   corev1.PodSpec
		refuse string
	}{
		{"container", corev1.PodSpec{Containers: []corev1.Container{{Name: "fuseboxd"}}},
			`fusebox: the pod has a container named "fuseboxd", the name of the decision sidecar that fusebox.dev/sidecar: "true" adds; rename that container, or remove the annotation (to run fuseboxd yourself, make it an init container with restartPolicy: Always, which Fusebox leaves alone)`},
		{"init container", corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}, InitContainers: []corev1.Container{{Name: "fuseboxd"}}},
			`fusebox: the pod has an init container named "fuseboxd" that runs to completion, and fusebox.dev/sidecar: "true" adds the decision sidecar under that name; rename that init container, or remove the annotation`},
		{"its own sidecar", corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}, InitContainers: []corev1.Container{{Name: "fuseboxd", Image: "mine", RestartPolicy: &always}}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{SidecarAnnotation: "true"}}, Spec: tc.spec}
			resp := Injector{}.Handle(context.Background(), createRequest(mustJSON(t, pod)))
			if tc.refuse == "" {
				if !resp.Allowed {
					t.Fatalf("refused: %+v", resp.Result)
				}
				out := decodePod(t, applyPatch(t, mustJSON(t, pod), resp))
				if len(out.Spec.InitContainers) != 1 || out.Spec.InitContainers[0].Image != "mine" {
					t.Errorf("init containers %+v: want the pod's own fuseboxd alone", out.Spec.InitContainers)
				}
				return
			}
			if resp.Allowed || len(resp.Patches) != 0 || resp.Result == nil || resp.Result.Message != tc.refuse {
				t.Errorf("allowed %v patches %v result %+v, want refused with\n%s", resp.Allowed, resp.Patches, resp.Result, tc.refuse)
			}
		})
	}
}
