package podinject

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	jsonpatchapply "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

var podKind = metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}

func createRequest(raw []byte) admission.Request {
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: "1", Kind: podKind, Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
		Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: raw},
	}}
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// admit runs the injector on raw and returns the patched object and the response.
func admit(t testing.TB, raw []byte) ([]byte, admission.Response) {
	t.Helper()
	resp := Injector{}.Handle(context.Background(), createRequest(raw))
	if !resp.Allowed {
		t.Fatalf("denied: %+v", resp.Result)
	}
	if len(resp.Patches) == 0 {
		return raw, resp
	}
	return applyPatch(t, raw, resp), resp
}

// applyPatch applies resp's patch to raw, as the API server would.
func applyPatch(t testing.TB, raw []byte, resp admission.Response) []byte {
	t.Helper()
	patch, err := jsonpatchapply.DecodePatch(mustJSON(t, resp.Patches))
	if err != nil {
		t.Fatal(err)
	}
	out, err := patch.Apply(raw)
	if err != nil {
		t.Fatalf("patch %s does not apply: %v", mustJSON(t, resp.Patches), err)
	}
	return out
}

func decodePod(t testing.TB, raw []byte) *corev1.Pod {
	t.Helper()
	var p corev1.Pod
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatal(err)
	}
	return &p
}

// asStored fills in what the API server defaults in what Fusebox injects, so
// that re-admission sees what a stored pod holds.
func asStored(p *corev1.Pod) {
	mode := int32(0o644)
	for i := range p.Spec.Volumes {
		if cm := p.Spec.Volumes[i].ConfigMap; cm != nil && cm.DefaultMode == nil {
			cm.DefaultMode = &mode
		}
		if pr := p.Spec.Volumes[i].Projected; pr != nil && pr.DefaultMode == nil {
			pr.DefaultMode = &mode
		}
	}
	for _, cs := range [][]corev1.Container{p.Spec.Containers, p.Spec.InitContainers} {
		for i := range cs {
			for j := range cs[i].Env {
				if vf := cs[i].Env[j].ValueFrom; vf != nil && vf.FieldRef != nil && vf.FieldRef.APIVersion == "" {
					vf.FieldRef.APIVersion = "v1"
				}
			}
		}
	}
}

func annotated(containers ...corev1.Container) *corev1.Pod {
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "shop", Annotations: map[string]string{resiliencev1alpha1.AnnotationInject: "true"}},
		Spec:       corev1.PodSpec{Containers: containers},
	}
}

func hasInjected(t *testing.T, where string, c corev1.Container) {
	t.Helper()
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == VolumeName && m.MountPath == MountPath && m.ReadOnly
	}) {
		t.Errorf("%s: no read-only mount of %s at %s: %+v", where, VolumeName, MountPath, c.VolumeMounts)
	}
	for _, want := range configEnv() {
		if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return sameEnv(e, want) }) {
			t.Errorf("%s: no %s: %+v", where, want.Name, c.Env)
		}
	}
}

func TestInjectsAndIsIdempotent(t *testing.T) {
	pod := annotated(
		corev1.Container{Name: "app", Image: "app", Env: []corev1.EnvVar{{Name: "LOG_LEVEL", Value: "info"}}},
		corev1.Container{Name: "proxy", Image: "proxy"},
	)
	always := corev1.ContainerRestartPolicyAlways
	pod.Spec.InitContainers = []corev1.Container{
		{Name: "migrate", Image: "migrate"},
		{Name: "sidecar", Image: "sidecar", RestartPolicy: &always},
	}
	pod.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}

	out, resp := admit(t, mustJSON(t, pod))
	if len(resp.Warnings) != 0 {
		t.Errorf("warnings on a pod with nothing of its own: %q", resp.Warnings)
	}
	got := decodePod(t, out)
	if len(got.Spec.Volumes) != 2 || got.Spec.Volumes[0].Name != "data" ||
		got.Spec.Volumes[1].ConfigMap == nil || got.Spec.Volumes[1].ConfigMap.Name != breakerconfig.ConfigMapName ||
		got.Spec.Volumes[1].ConfigMap.Optional == nil || !*got.Spec.Volumes[1].ConfigMap.Optional {
		t.Errorf("volumes: %+v", got.Spec.Volumes)
	}
	hasInjected(t, "app", got.Spec.Containers[0])
	hasInjected(t, "proxy", got.Spec.Containers[1])
	hasInjected(t, "sidecar", got.Spec.InitContainers[1])
	if c := got.Spec.InitContainers[0]; len(c.Env) != 0 || len(c.VolumeMounts) != 0 {
		t.Errorf("plain init container was injected: %+v", c)
	}
	if e := got.Spec.Containers[0].Env; e[0].Name != "LOG_LEVEL" || len(e) != 5 {
		t.Errorf("app env %+v: want LOG_LEVEL first, then Fusebox's four", e)
	}
	// Named here rather than read from injectedEnv: what the downward API must give
	// pkg/breaker/kube, the pod's UID included (its report is owned by its Pod).
	for name, path := range map[string]string{breakerconfig.EnvPodName: "metadata.name", breakerconfig.EnvNamespace: "metadata.namespace", breakerconfig.EnvPodUID: "metadata.uid"} {
		i := slices.IndexFunc(got.Spec.Containers[0].Env, func(e corev1.EnvVar) bool { return e.Name == name })
		if i < 0 {
			t.Errorf("app env has no %s", name)
			continue
		}
		if vf := got.Spec.Containers[0].Env[i].ValueFrom; vf == nil || vf.FieldRef == nil || vf.FieldRef.FieldPath != path {
			t.Errorf("app %s is %+v, want fieldRef %s", name, got.Spec.Containers[0].Env[i], path)
		}
	}

	// Admitted again, as stored (with the API server's defaults), twice.
	for pass := 2; pass <= 3; pass++ {
		stored := decodePod(t, out)
		asStored(stored)
		again, resp := admit(t, mustJSON(t, stored))
		if len(resp.Patches) != 0 || resp.PatchType != nil || len(resp.Warnings) != 0 {
			t.Fatalf("pass %d: patches %v, warnings %q: want none", pass, resp.Patches, resp.Warnings)
		}
		out = again
	}
}

func TestKeepsWhatThePodHas(t *testing.T) {
	pod := annotated(
		corev1.Container{Name: "app", Image: "app",
			Env: []corev1.EnvVar{
				{Name: "POD_NAME", Value: "fixed"},
				{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}},
			},
			VolumeMounts: []corev1.VolumeMount{{Name: "custom", MountPath: "/etc/fusebox/"}},
		},
		corev1.Container{Name: "worker", Image: "worker", Env: []corev1.EnvVar{{Name: "FUSEBOX_CONFIG_DIR", Value: "/config"}}},
	)
	pod.Spec.Volumes = []corev1.Volume{
		{Name: "custom", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: VolumeName, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}},
	}
	raw := mustJSON(t, pod)
	out, resp := admit(t, raw)
	wantWarnings := []string{
		`fusebox: kept the pod's own volume "fusebox-breakers", which is not the fusebox-breakers ConfigMap; it is what /etc/fusebox mounts`,
		`fusebox: container "app": kept its own volume mount at /etc/fusebox (volume "custom")`,
		`fusebox: container "app": kept its own environment variable POD_NAME`,
		`fusebox: container "worker": kept its own environment variable FUSEBOX_CONFIG_DIR`,
	}
	if strings.Join(resp.Warnings, "\n") != strings.Join(wantWarnings, "\n") {
		t.Errorf("warnings:\n%q\nwant:\n%q", resp.Warnings, wantWarnings)
	}
	got := decodePod(t, out)
	if v := got.Spec.Volumes; len(v) != 2 || v[1].Projected == nil {
		t.Errorf("the pod's own volume was replaced: %+v", v)
	}
	app := got.Spec.Containers[0]
	if len(app.VolumeMounts) != 1 || app.VolumeMounts[0].Name != "custom" {
		t.Errorf("app mounts %+v: want only its own", app.VolumeMounts)
	}
	if e := app.Env; len(e) != 4 || e[0].Value != "fixed" || e[1].Name != breakerconfig.EnvNamespace || e[2].Name != breakerconfig.EnvConfigDir || e[3].Name != breakerconfig.EnvPodUID {
		t.Errorf("app env %+v: want its POD_NAME and POD_NAMESPACE kept, FUSEBOX_CONFIG_DIR and POD_UID added", e)
	}
	worker := got.Spec.Containers[1]
	if e := worker.Env; len(e) != 4 || e[0].Value != "/config" {
		t.Errorf("worker env %+v", e)
	}
	if len(worker.VolumeMounts) != 1 || worker.VolumeMounts[0].Name != VolumeName {
		t.Errorf("worker mounts %+v: want the fusebox-breakers volume at %s", worker.VolumeMounts, MountPath)
	}

	// Again: nothing to add, the same warnings.
	_, again := admit(t, out)
	if len(again.Patches) != 0 || strings.Join(again.Warnings, "\n") != strings.Join(wantWarnings, "\n") {
		t.Errorf("second pass: patches %v warnings %q", again.Patches, again.Warnings)
	}
}

func TestAnnotation(t *testing.T) {
	for _, tc := range []struct {
		annotations map[string]string
		inject      bool
		warning     string
	}{
		{nil, false, ""},
		{map[string]string{resiliencev1alpha1.AnnotationInject: "false"}, false, ""},
		{map[string]string{resiliencev1alpha1.AnnotationInject: "yes"}, false, `fusebox: annotation fusebox.dev/inject is "yes"; only "true" injects the breaker configuration, so nothing was injected`},
		{map[string]string{resiliencev1alpha1.AnnotationInject: "true"}, true, ""},
	} {
		pod := annotated(corev1.Container{Name: "app", Image: "app"})
		pod.Annotations = tc.annotations
		_, resp := admit(t, mustJSON(t, pod))
		if (len(resp.Patches) > 0) != tc.inject {
			t.Errorf("%v: patches %v, want injection %v", tc.annotations, resp.Patches, tc.inject)
		}
		if strings.Join(resp.Warnings, "") != tc.warning {
			t.Errorf("%v: warnings %q, want %q", tc.annotations, resp.Warnings, tc.warning)
		}
	}
}

func TestMalformedRequests(t *testing.T) {
	pod := mustJSON(t, annotated(corev1.Container{Name: "app", Image: "app"}))
	for _, tc := range []struct {
		name    string
		mutate  func(*admission.Request)
		allowed bool
	}{
		{"no object", func(r *admission.Request) { r.Object.Raw = nil }, false},
		{"not JSON", func(r *admission.Request) { r.Object.Raw = []byte("{spec:") }, false},
		{"wrong types", func(r *admission.Request) { r.Object.Raw = []byte(`{"spec":{"containers":"app"}}`) }, false},
		{"not a pod", func(r *admission.Request) {
			r.Kind = metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
		}, false},
		{"no containers", func(r *admission.Request) {
			r.Object.Raw = []byte(`{"metadata":{"annotations":{"fusebox.dev/inject":"true"}}}`)
		}, true},
		{"an update", func(r *admission.Request) { r.Operation = admissionv1.Update }, true},
		{"a subresource", func(r *admission.Request) { r.SubResource = "ephemeralcontainers" }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := createRequest(pod)
			tc.mutate(&req)
			resp := Injector{}.Handle(context.Background(), req)
			if resp.Allowed != tc.allowed || len(resp.Patches) != 0 {
				t.Fatalf("allowed=%v patches=%v, want allowed=%v and no patch", resp.Allowed, resp.Patches, tc.allowed)
			}
			if !tc.allowed && (resp.Result == nil || resp.Result.Code != http.StatusBadRequest || !strings.HasPrefix(resp.Result.Message, "fusebox pod injection: ")) {
				t.Errorf("denial %+v: want a 400 that says who refused and why", resp.Result)
			}
		})
	}
}

// What the API server would send if it sent garbage: a denial in a well-formed
// AdmissionReview, never a panic or a dropped connection.
func TestServeHTTPGarbage(t *testing.T) {
	srv := httptest.NewServer(&admission.Webhook{Handler: Injector{}})
	defer srv.Close()
	for _, body := range []string{"", "garbage", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1","kind":{"version":"v1","kind":"Pod"},"operation":"CREATE","object":"x"}}`} {
		resp, err := http.Post(srv.URL, "application/json", bytes.NewBufferString(body))
		if err != nil {
			t.Fatal(err)
		}
		var review admissionv1.AdmissionReview
		err = json.NewDecoder(resp.Body).Decode(&review)
		resp.Body.Close()
		if err != nil || review.Response == nil || review.Response.Allowed || review.Response.Result.Code != http.StatusBadRequest {
			t.Errorf("body %q: %v %+v, want a 400 denial", body, err, review.Response)
		}
	}
}

// The names the webhook injects are breakerconfig's, the one owner of the names the
// operator and the pods share, which pkg/breaker/kube reads.
func TestEnvironmentNamesAreBreakerconfigs(t *testing.T) {
	var names []string
	for _, e := range configEnv() {
		names = append(names, e.Name)
	}
	want := []string{breakerconfig.EnvConfigDir, breakerconfig.EnvPodName, breakerconfig.EnvNamespace, breakerconfig.EnvPodUID}
	if !slices.Equal(names, want) {
		t.Errorf("injected %v, want %v", names, want)
	}
}
