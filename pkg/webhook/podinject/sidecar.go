package podinject

import (
	"fmt"
	"path"

	"gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// The per-pod decision sidecar (cmd/fuseboxd, docs/fuseboxd.md), injected when a pod
// carries SidecarAnnotation: "true".
const (
	SidecarAnnotation = resiliencev1alpha1.AnnotationSidecar
	SidecarName       = "fuseboxd"
	SocketVolumeName  = "fusebox-socket"
	SocketDir         = "/var/run/fusebox"
	// DefaultSidecarImage is the sidecar's image when the Injector names none.
	DefaultSidecarImage = "ghcr.io/fusebox-dev/fuseboxd:latest"
)

// SidecarUser is the user and group the sidecar runs as: the image's own non-root
// user (hack/image's nonroot, 65532), named by number because Pod Security's restricted
// level must see a non-zero UID without reading the image.
const SidecarUser = 65532

// Requests of the sidecar: the daemon idles at a few millicores, and its resident
// memory with 100 breakers is about 26 MiB (docs/benchmarks.md, "fuseboxd"). No limits:
// a sidecar throttled or killed under a burst would fail every worker's calls open.
var sidecarRequests = corev1.ResourceList{
	corev1.ResourceCPU:    resource.MustParse("10m"),
	corev1.ResourceMemory: resource.MustParse("32Mi"),
}

// SidecarBinary is where the sidecar's image holds fuseboxd (make image-fuseboxd puts it
// there, as its entrypoint); the startup probe runs it.
const SidecarBinary = "/fuseboxd"

// sidecarSecurityContext meets Pod Security's restricted level on its own, whatever the
// pod sets, so that an annotated pod that meets it still does once injected: non-root by
// number, no privilege escalation, no capabilities, the runtime's seccomp profile. The
// root filesystem is read-only: fuseboxd writes only its socket, into the shared
// emptyDir, and the socket is writable by every user (internal/fuseboxd's ListenUnix
// makes it 0666; the kubelet makes an emptyDir 0777), so the application's containers
// reach it whatever user they run as.
func sidecarSecurityContext() *corev1.SecurityContext {
	user, no, yes := int64(SidecarUser), false, true
	return &corev1.SecurityContext{
		RunAsNonRoot:             &yes,
		RunAsUser:                &user,
		RunAsGroup:               &user,
		AllowPrivilegeEscalation: &no,
		ReadOnlyRootFilesystem:   &yes,
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// sidecarContainer is the fuseboxd native sidecar: an init container that keeps
// running (restartPolicy Always), started before the application's containers, wired
// as p plans (to the mounted ConfigMap, reporting as the pod, or to the node agent),
// serving its socket on the shared emptyDir.
//
// It runs `fuseboxd serve`. Its startup probe (`fuseboxd probe`, GET /healthz on the socket, every second for up
// to a minute) holds the application's containers back until the socket answers: the
// kubelet starts the containers after a native sidecar only once the sidecar's startup
// probe has succeeded, so no worker's first call finds nothing listening.
func (p *planner) sidecarContainer(image string) corev1.Container {
	always := corev1.ContainerRestartPolicyAlways
	socket := path.Join(SocketDir, "fusebox.sock")
	wiring := configMount()
	if p.agentURL != "" {
		wiring = tokenMount()
	}
	return corev1.Container{
		Name:  SidecarName,
		Image: image,
		// Not the default for a :latest tag (Always), which asks a registry every time a
		// pod starts: an image loaded onto the node by hand (a local cluster, an
		// air-gapped one) is used as it is, and a registry's is pulled once per node.
		ImagePullPolicy: corev1.PullIfNotPresent,
		Args:            []string{"serve", "--socket", socket},
		RestartPolicy:   &always,
		StartupProbe: &corev1.Probe{
			ProbeHandler:     corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{SidecarBinary, "probe", "--socket", socket}}},
			PeriodSeconds:    1,
			TimeoutSeconds:   2,
			FailureThreshold: 60,
		},
		Env:             p.environment(),
		Resources:       corev1.ResourceRequirements{Requests: sidecarRequests},
		SecurityContext: sidecarSecurityContext(),
		VolumeMounts:    []corev1.VolumeMount{wiring, {Name: SocketVolumeName, MountPath: SocketDir}},
	}
}

// PlanSidecar returns the JSON patch that adds the fuseboxd sidecar to pod and mounts
// its socket's directory in every container, and a warning for each thing it left
// alone. Like Plan it adds only, and planning the patched pod again yields nothing.
func PlanSidecar(pod *corev1.Pod, image string) ([]jsonpatch.JsonPatchOperation, []string) {
	var p planner
	p.sidecar(pod, image)
	return p.ops, p.warnings
}

// sidecarNameTaken refuses a pod with a container of the sidecar's name that is not a
// native sidecar: the API server would refuse the patched pod with a duplicate name, an
// error that names neither Fusebox nor the fix. A native sidecar of that name is the
// one injected before, or the pod's own fuseboxd, and is left as it is.
func sidecarNameTaken(pod *corev1.Pod) string {
	for _, c := range pod.Spec.Containers {
		if c.Name == SidecarName {
			return fmt.Sprintf("fusebox: the pod has a container named %q, the name of the decision sidecar that %s: \"true\" adds; "+
				"rename that container, or remove the annotation (to run fuseboxd yourself, make it an init container with restartPolicy: Always, which Fusebox leaves alone)",
				SidecarName, SidecarAnnotation)
		}
	}
	for _, c := range pod.Spec.InitContainers {
		if c.Name == SidecarName && (c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways) {
			return fmt.Sprintf("fusebox: the pod has an init container named %q that runs to completion, and %s: \"true\" adds the decision sidecar under that name; "+
				"rename that init container, or remove the annotation",
				SidecarName, SidecarAnnotation)
		}
	}
	return ""
}

func (p *planner) sidecar(pod *corev1.Pod, image string) {
	if image == "" {
		image = DefaultSidecarImage
	}
	p.podVolume(pod.Spec.Volumes)
	p.socketVolume(pod.Spec.Volumes)
	present := false
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if c.Name == SidecarName {
			present = true
			continue
		}
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			p.socketMount(fmt.Sprintf("/spec/initContainers/%d", i), "init container", c)
		}
	}
	for i := range pod.Spec.Containers {
		p.socketMount(fmt.Sprintf("/spec/containers/%d", i), "container", &pod.Spec.Containers[i])
	}
	if present {
		return // injected already, or the pod brings its own
	}
	// First, so that it is serving before any other container starts.
	if pod.Spec.InitContainers == nil && !p.created["/spec/initContainers"] {
		p.create("/spec/initContainers", []corev1.Container{p.sidecarContainer(image)})
		return
	}
	p.add("/spec/initContainers/0", p.sidecarContainer(image))
}

func (p *planner) socketVolume(volumes []corev1.Volume) {
	for _, v := range volumes {
		if v.Name == SocketVolumeName {
			if v.EmptyDir == nil {
				p.warn("kept the pod's own volume %q, which is not an emptyDir; it is what %s mounts", SocketVolumeName, SocketDir)
			}
			return
		}
	}
	appendItem(p, "/spec/volumes", volumes != nil, corev1.Volume{Name: SocketVolumeName, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
}

// socketMount mounts the socket's directory in c unless it mounts something there.
func (p *planner) socketMount(at, kind string, c *corev1.Container) {
	for _, m := range c.VolumeMounts {
		if path.Clean(m.MountPath) == SocketDir {
			if m.Name != SocketVolumeName {
				p.warn("%s %q: kept its own volume mount at %s (volume %q)", kind, c.Name, SocketDir, m.Name)
			}
			return
		}
	}
	appendItem(p, at+"/volumeMounts", c.VolumeMounts != nil, corev1.VolumeMount{Name: SocketVolumeName, MountPath: SocketDir})
}

// create adds the array at path, which later items of this patch are appended to.
func (p *planner) create(path string, value any) {
	if p.created == nil {
		p.created = map[string]bool{}
	}
	p.created[path] = true
	p.add(path, value)
}

// appendItem appends item to the array at path, creating it when neither the pod
// (exists) nor an earlier operation of this patch has it.
func appendItem[T any](p *planner, path string, exists bool, item T) {
	if exists || p.created[path] {
		p.add(path+"/-", item)
		return
	}
	p.create(path, []T{item})
}

// patched answers with ops and warnings: unchanged when there is nothing to add.
func patched(ops []jsonpatch.JsonPatchOperation, warnings []string) admission.Response {
	if len(ops) == 0 {
		return admission.Allowed("").WithWarnings(warnings...)
	}
	return admission.Patched("", ops...).WithWarnings(warnings...)
}
