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

// The webhooks' paths. Path admits pods that carry one of the annotations, as they
// ask; NamespaceOptInPath admits every pod of a namespace labelled
// fusebox.dev/node-agent=enabled, wired to the node agent unless annotated out. The two
// configurations' namespace selectors exclude each other, so the API server sends a pod
// to one of them at most, and the path tells the handler what the namespace chose: the
// webhook never reads a Namespace, and needs no access to them.
const (
	Path               = "/mutate-v1-pod"
	NamespaceOptInPath = "/mutate-v1-pod-node-agent-namespace"
)

// What is injected: the volume and where it is mounted. The environment names
// are the ones pkg/breaker/kube reads, breakerconfig's Env constants.
const (
	VolumeName = "fusebox-breakers"
	MountPath  = "/etc/fusebox"
)

// The pod webhooks fail open and run outside the system namespaces and the operator's
// own (fusebox-system: edit the patches below if you deploy elsewhere), and in no
// namespace labelled fusebox.dev/injection=disabled. The first runs only for pods that
// carry an annotation (matchConditions); the second for every pod of a namespace
// labelled fusebox.dev/node-agent=enabled but those annotated "false".
//
// +kubebuilder:webhook:path=/mutate-v1-pod,mutating=true,failurePolicy=ignore,sideEffects=None,groups="",resources=pods,verbs=create,versions=v1,name=inject.pods.fusebox.dev,admissionReviewVersions=v1,reinvocationPolicy=Never,timeoutSeconds=5,patch=`{"namespaceSelector":{"matchExpressions":[{"key":"kubernetes.io/metadata.name","operator":"NotIn","values":["kube-system","kube-public","kube-node-lease","fusebox-system"]},{"key":"fusebox.dev/injection","operator":"NotIn","values":["disabled"]},{"key":"fusebox.dev/node-agent","operator":"NotIn","values":["enabled"]}]},"matchConditions":[{"name":"annotated","expression":"has(object.metadata.annotations) && ('fusebox.dev/inject' in object.metadata.annotations || 'fusebox.dev/sidecar' in object.metadata.annotations || 'fusebox.dev/node-agent' in object.metadata.annotations)"}]}`
// +kubebuilder:webhook:path=/mutate-v1-pod-node-agent-namespace,mutating=true,failurePolicy=ignore,sideEffects=None,groups="",resources=pods,verbs=create,versions=v1,name=node-agent.pods.fusebox.dev,admissionReviewVersions=v1,reinvocationPolicy=Never,timeoutSeconds=5,patch=`{"namespaceSelector":{"matchExpressions":[{"key":"kubernetes.io/metadata.name","operator":"NotIn","values":["kube-system","kube-public","kube-node-lease","fusebox-system"]},{"key":"fusebox.dev/injection","operator":"NotIn","values":["disabled"]},{"key":"fusebox.dev/node-agent","operator":"In","values":["enabled"]}]},"matchConditions":[{"name":"not-opted-out","expression":"!has(object.metadata.annotations) || !('fusebox.dev/node-agent' in object.metadata.annotations) || object.metadata.annotations['fusebox.dev/node-agent'] != 'false'"}]}`

// Injector is the admission handler of the pod webhooks. It keeps no state of its own
// (Agent caches one Service read) and is safe for concurrent use.
type Injector struct {
	// SidecarImage is the image of the fuseboxd sidecar (SidecarAnnotation); empty
	// means DefaultSidecarImage.
	SidecarImage string
	// Agent finds the node agent's address for the pods wired to it. Nil names the
	// default Service by its DNS name, with no lookup.
	Agent *AgentLocator
	// NamespaceOptedIn says that every pod this handler admits is in a namespace
	// labelled fusebox.dev/node-agent=enabled: true for the handler served at
	// NamespaceOptInPath.
	NamespaceOptedIn bool
}

var _ admission.Handler = Injector{}

// Handle implements admission.Handler.
func (i Injector) Handle(ctx context.Context, req admission.Request) admission.Response {
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
	var p planner
	w := i.wiringOf(&pod, &p)
	if !w.sidecar && !w.containers {
		return admission.Allowed("").WithWarnings(p.warnings...)
	}
	if len(pod.Spec.Containers) == 0 {
		// Not a pod the API server would accept; leave the refusal to it, and
		// never patch paths the object does not have.
		return admission.Allowed("")
	}
	if w.sidecar {
		if msg := sidecarNameTaken(&pod); msg != "" {
			return admission.Denied(msg)
		}
	}
	if w.agent {
		url, warning := i.Agent.URL(ctx)
		p.agentURL = url
		if warning != "" {
			p.warnings = append(p.warnings, warning)
		}
	}
	if w.containers {
		p.plan(&pod)
	}
	if w.sidecar {
		p.sidecar(&pod, i.SidecarImage) // last: it inserts the first init container
	}
	return patched(p.ops, p.warnings)
}

// wiring is what a pod asked for.
type wiring struct {
	// sidecar: the fuseboxd sidecar.
	sidecar bool
	// containers: the pod's containers get the environment (and the volume) a Go
	// application's kube.FromEnvironment reads.
	containers bool
	// agent: wired to the node's agent, not to the mounted ConfigMap.
	agent bool
}

// wiringOf reads the pod's annotations (and, through the path it was sent to, its
// namespace's label), warning through p about a value that means nothing. The node
// agent's opt-in wires the pod's containers unless the pod asks for the sidecar, which
// then talks to the agent on their behalf; fusebox.dev/inject wires them either way.
func (i Injector) wiringOf(pod *corev1.Pod, p *planner) wiring {
	a := pod.Annotations
	w := wiring{sidecar: a[resiliencev1alpha1.AnnotationSidecar] == "true", agent: i.NamespaceOptedIn}
	switch v, ok := a[resiliencev1alpha1.AnnotationNodeAgent]; {
	case !ok:
	case v == "true":
		w.agent = true
	case v == "false":
		w.agent = false
	default:
		p.warn("annotation %s is %s; only \"true\" (and \"false\", in a namespace labelled %s=%s) means something, so the namespace decides",
			resiliencev1alpha1.AnnotationNodeAgent, strconv.Quote(v), resiliencev1alpha1.LabelNodeAgent, resiliencev1alpha1.NodeAgentEnabled)
	}
	if w.agent && pod.Spec.ServiceAccountName == "" && pod.Spec.DeprecatedServiceAccount == "" {
		// The API server refuses a projected token in a pod without a service
		// account; its ServiceAccount admission names one before any webhook runs,
		// unless it is turned off. Never patch a pod into one the API server refuses.
		p.warn("the pod has no serviceAccountName, which its token for the node agent needs, so it is not wired to the agent")
		w.agent = false
	}
	inject, ok := a[resiliencev1alpha1.AnnotationInject]
	w.containers = inject == "true" || (w.agent && !w.sidecar)
	if ok && inject != "true" && inject != "false" && !w.sidecar && !w.containers {
		p.warn("annotation %s is %s; only \"true\" injects the breaker configuration, so nothing was injected", resiliencev1alpha1.AnnotationInject, strconv.Quote(inject))
	}
	return w
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

// plan wires the pod's containers, and its sidecar init containers (restartPolicy
// Always), which run beside the application; plain init containers run to completion
// before it starts and are left alone.
func (p *planner) plan(pod *corev1.Pod) {
	p.podVolume(pod.Spec.Volumes)
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
	// volumePlanned: the pod's Fusebox volume (the ConfigMap, or the agent's token)
	// has been planned or found.
	volumePlanned bool
	// agentURL, when set, wires the pod to the node agent there (nodeagent.go) rather
	// than to the mounted ConfigMap.
	agentURL string
}

func (p *planner) add(path string, value any) {
	p.ops = append(p.ops, jsonpatch.NewOperation("add", path, value))
}

func (p *planner) warn(format string, args ...any) {
	p.warnings = append(p.warnings, "fusebox: "+fmt.Sprintf(format, args...))
}

// podVolume adds the volume the pod's Fusebox reads, once.
func (p *planner) podVolume(volumes []corev1.Volume) {
	if p.volumePlanned {
		return
	}
	p.volumePlanned = true
	if p.agentURL != "" {
		p.tokenVolume(volumes)
		return
	}
	p.configVolume(volumes)
}

func (p *planner) container(at, kind string, c *corev1.Container) {
	if p.agentURL != "" {
		p.mountAt(at, kind, c, tokenMount())
	} else {
		p.mountAt(at, kind, c, configMount())
	}
	p.env(at, kind, c, p.environment())
}

// environment is what the planned wiring puts in each container, in order.
func (p *planner) environment() []corev1.EnvVar {
	if p.agentURL != "" {
		return agentEnv(p.agentURL)
	}
	return configEnv()
}

// mountAt adds want unless the container mounts something at its path already. A
// mount of want's volume there (not a sub-path of it) is Fusebox's own, read-only or
// not: the kubelet mounts ConfigMap and projected volumes read-only either way.
func (p *planner) mountAt(at, kind string, c *corev1.Container, want corev1.VolumeMount) {
	for _, m := range c.VolumeMounts {
		if path.Clean(m.MountPath) != want.MountPath {
			continue
		}
		if m.Name != want.Name || m.SubPath != "" || m.SubPathExpr != "" {
			p.warn("%s %q: kept its own volume mount at %s (volume %q)", kind, c.Name, want.MountPath, m.Name)
		}
		return
	}
	appendItem(p, at+"/volumeMounts", c.VolumeMounts != nil, want)
}

// podIdentityEnv is the downward-API environment of every wiring: who the pod is,
// without access to Pods (its report is owned by its UID).
func podIdentityEnv() []corev1.EnvVar {
	fieldRef := func(fieldPath string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: fieldPath}}
	}
	return []corev1.EnvVar{
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

// env appends the variables of wanted the container does not set. One the container
// sets to something else is kept, with a warning. (Variables from envFrom are not
// visible here: an explicit env entry overrides them, which is how a pod that gets
// POD_NAME from a ConfigMap would see Fusebox's instead.)
func (p *planner) env(at, kind string, c *corev1.Container, wanted []corev1.EnvVar) {
	var missing []corev1.EnvVar
	for _, want := range wanted {
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

// SetupWithManager serves inj on mgr's webhook server: at Path, and with
// NamespaceOptedIn at NamespaceOptInPath.
func SetupWithManager(mgr ctrl.Manager, inj Injector) error {
	byAnnotation, byNamespace := inj, inj
	byAnnotation.NamespaceOptedIn, byNamespace.NamespaceOptedIn = false, true
	srv := mgr.GetWebhookServer()
	srv.Register(Path, &admission.Webhook{Handler: byAnnotation})
	srv.Register(NamespaceOptInPath, &admission.Webhook{Handler: byNamespace})
	return nil
}
