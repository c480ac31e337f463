package podinject

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path"
	"strconv"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// Path is where the webhook is served.
const Path = "/mutate-v1-pod"

// What is injected: the volume and where it is mounted. The environment names
// are the ones pkg/breaker/kube reads, breakerconfig's Env constants.
const (
	VolumeName = "fusebox-breakers"
	MountPath  = "/etc/fusebox"
)

// The pod webhook fails open and runs only for pods that carry the annotation
// (matchConditions), outside the system namespaces and the operator's own
// (fusebox-system: edit the patch below if you deploy elsewhere), and in no
// namespace labelled fusebox.dev/injection=disabled.
//
// +kubebuilder:webhook:path=/mutate-v1-pod,mutating=true,failurePolicy=ignore,sideEffects=None,groups="",resources=pods,verbs=create,versions=v1,name=inject.pods.fusebox.dev,admissionReviewVersions=v1,reinvocationPolicy=Never,timeoutSeconds=5,patch=`{"namespaceSelector":{"matchExpressions":[{"key":"kubernetes.io/metadata.name","operator":"NotIn","values":["kube-system","kube-public","kube-node-lease","fusebox-system"]},{"key":"fusebox.dev/injection","operator":"NotIn","values":["disabled"]}]},"matchConditions":[{"name":"annotated","expression":"has(object.metadata.annotations) && ('fusebox.dev/inject' in object.metadata.annotations || 'fusebox.dev/sidecar' in object.metadata.annotations)"}]}`

// Injector is the admission handler of the pod webhook. It is stateless and
// safe for concurrent use.
type Injector struct {
	// SidecarImage is the image of the fuseboxd sidecar (SidecarAnnotation); empty
	// means DefaultSidecarImage.
	SidecarImage string
}

var _ admission.Handler = Injector{}

// Handle implements admission.Handler.
func (i Injector) Handle(_ context.Context, req admission.Request) admission.Response {
	if req.Kind.Group != "" || req.Kind.Kind != "Pod" {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("fusebox pod injection: expected a Pod, got %q", req.Kind.String()))
	}
	if req.Operation != admissionv1.Create || req.SubResource != "" {
		return admission.Allowed("fusebox injects only into pods being created")
	}
	if len(req.Object.Raw) == 0 {
		return admission.Errored(http.StatusBadRequest, errors.New("fusebox pod injection: the admission request carries no pod"))
	}
	// Case-sensitive, as the API server reads it: the patch's paths must name
	// the fields the request really has.
	var pod corev1.Pod
	if err := utiljson.Unmarshal(req.Object.Raw, &pod); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("fusebox pod injection: cannot decode the pod: %w", err))
	}
	sidecar := pod.Annotations[SidecarAnnotation] == "true"
	switch v, ok := pod.Annotations[resiliencev1alpha1.AnnotationInject]; {
	case sidecar:
		// The sidecar gets the configuration; with both annotations the application's
		// containers get it too.
	case !ok || v == "false":
		return admission.Allowed("")
	case v != "true":
		return admission.Allowed("").WithWarnings(fmt.Sprintf(
			"fusebox: annotation %s is %s; only \"true\" injects the breaker configuration, so nothing was injected", resiliencev1alpha1.AnnotationInject, strconv.Quote(v)))
	}
	if len(pod.Spec.Containers) == 0 {
		// Not a pod the API server would accept; leave the refusal to it, and
		// never patch paths the object does not have.
		return admission.Allowed("")
	}
	if sidecar {
		if msg := sidecarNameTaken(&pod); msg != "" {
			return admission.Denied(msg)
		}
	}
	var p planner
	if pod.Annotations[resiliencev1alpha1.AnnotationInject] == "true" {
		p.plan(&pod)
	}
	if sidecar {
		p.sidecar(&pod, i.SidecarImage) // last: it inserts the first init container
	}
	return patched(p.ops, p.warnings)
}

// Plan returns the JSON patch that injects Fusebox into pod, and a warning for
// each thing it left alone because the pod has its own. It reads pod only.
// Applying the patch and planning again yields no operation and the same
// warnings.
func Plan(pod *corev1.Pod) ([]jsonpatch.JsonPatchOperation, []string) {
	var p planner
	p.plan(pod)
	return p.ops, p.warnings
}

func (p *planner) plan(pod *corev1.Pod) {
	p.volume(pod.Spec.Volumes)
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			p.container(fmt.Sprintf("/spec/initContainers/%d", i), "init container", c)
		}
	}
	for i := range pod.Spec.Containers {
		p.container(fmt.Sprintf("/spec/containers/%d", i), "container", &pod.Spec.Containers[i])
	}
}

type planner struct {
	ops      []jsonpatch.JsonPatchOperation
	warnings []string
	// created holds the array paths an operation of this patch creates, to which
	// later items are appended rather than created again (sidecar.go).
	created map[string]bool
	// configVolume: the ConfigMap volume has been planned (or found).
	configVolume bool
}

func (p *planner) add(path string, value any) {
	p.ops = append(p.ops, jsonpatch.NewOperation("add", path, value))
}

func (p *planner) warn(format string, args ...any) {
	p.warnings = append(p.warnings, "fusebox: "+fmt.Sprintf(format, args...))
}

// injectedVolume is the volume Fusebox adds.
func injectedVolume() corev1.Volume {
	optional := true
	return corev1.Volume{Name: VolumeName, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: breakerconfig.ConfigMapName},
		Optional:             &optional,
	}}}
}

// volume adds the ConfigMap volume unless the pod has a volume of that name. A
// ConfigMap volume of fusebox-breakers counts as Fusebox's own whatever its
// items, mode or optionality (the API server fills in defaultMode, so an exact
// comparison would call an injected pod's volume foreign on the next pass). Any
// other volume of that name is the pod's; the mounts then mount it, since a
// volume named fusebox-breakers is most likely meant for Fusebox (a projected
// volume, say).
func (p *planner) volume(volumes []corev1.Volume) {
	if p.configVolume {
		return
	}
	p.configVolume = true
	for _, v := range volumes {
		if v.Name != VolumeName {
			continue
		}
		if cm := v.ConfigMap; cm == nil || cm.Name != breakerconfig.ConfigMapName {
			p.warn("kept the pod's own volume %q, which is not the %s ConfigMap; it is what %s mounts", VolumeName, breakerconfig.ConfigMapName, MountPath)
		}
		return
	}
	if volumes == nil {
		p.create("/spec/volumes", []corev1.Volume{injectedVolume()})
		return
	}
	p.add("/spec/volumes/-", injectedVolume())
}

func (p *planner) container(at, kind string, c *corev1.Container) {
	p.mount(at, kind, c)
	p.env(at, kind, c)
}

// mount adds the read-only mount at MountPath unless the container mounts
// something there already. A mount of the fusebox-breakers volume there (not
// a sub-path of it) is Fusebox's own, read-only or not: the kubelet mounts
// ConfigMap volumes read-only either way.
func (p *planner) mount(at, kind string, c *corev1.Container) {
	for _, m := range c.VolumeMounts {
		if path.Clean(m.MountPath) != MountPath {
			continue
		}
		if m.Name != VolumeName || m.SubPath != "" || m.SubPathExpr != "" {
			p.warn("%s %q: kept its own volume mount at %s (volume %q)", kind, c.Name, MountPath, m.Name)
		}
		return
	}
	m := corev1.VolumeMount{Name: VolumeName, MountPath: MountPath, ReadOnly: true}
	if c.VolumeMounts == nil {
		p.create(at+"/volumeMounts", []corev1.VolumeMount{m})
		return
	}
	p.add(at+"/volumeMounts/-", m)
}

// injectedEnv is the environment Fusebox adds, in order.
func injectedEnv() []corev1.EnvVar {
	fieldRef := func(fieldPath string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: fieldPath}}
	}
	return []corev1.EnvVar{
		{Name: breakerconfig.EnvConfigDir, Value: MountPath},
		{Name: breakerconfig.EnvPodName, ValueFrom: fieldRef("metadata.name")},
		{Name: breakerconfig.EnvNamespace, ValueFrom: fieldRef("metadata.namespace")},
		{Name: breakerconfig.EnvPodUID, ValueFrom: fieldRef("metadata.uid")},
	}
}

// sameEnv says whether the container's variable is, in effect, Fusebox's. The
// API server fills in fieldRef.apiVersion, so only the field path counts.
func sameEnv(have, want corev1.EnvVar) bool {
	if want.ValueFrom == nil {
		return have.ValueFrom == nil && have.Value == want.Value
	}
	return have.Value == "" && have.ValueFrom != nil && have.ValueFrom.FieldRef != nil &&
		have.ValueFrom.ResourceFieldRef == nil && have.ValueFrom.ConfigMapKeyRef == nil && have.ValueFrom.SecretKeyRef == nil &&
		have.ValueFrom.FieldRef.FieldPath == want.ValueFrom.FieldRef.FieldPath
}

// env appends the variables the container does not set. One the container sets
// to something else is kept, with a warning. (Variables from envFrom are not
// visible here: an explicit env entry overrides them, which is how a pod that
// gets POD_NAME from a ConfigMap would see Fusebox's instead.)
func (p *planner) env(at, kind string, c *corev1.Container) {
	var missing []corev1.EnvVar
	for _, want := range injectedEnv() {
		found := false
		for _, have := range c.Env {
			if have.Name != want.Name {
				continue
			}
			found = true
			if !sameEnv(have, want) {
				p.warn("%s %q: kept its own environment variable %s", kind, c.Name, want.Name)
			}
			break
		}
		if !found {
			missing = append(missing, want)
		}
	}
	if len(missing) == 0 {
		return
	}
	if c.Env == nil {
		p.add(at+"/env", missing)
		return
	}
	for _, e := range missing {
		p.add(at+"/env/-", e)
	}
}

// SetupWithManager serves the injector on mgr's webhook server, at Path, injecting
// sidecarImage as the fuseboxd sidecar (empty: DefaultSidecarImage).
func SetupWithManager(mgr ctrl.Manager, sidecarImage string) error {
	mgr.GetWebhookServer().Register(Path, &admission.Webhook{Handler: Injector{SidecarImage: sidecarImage}})
	return nil
}
