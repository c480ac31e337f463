package fleet

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// bystanderNamespace holds the pods of the rest of the cluster: pods that use no
// breaker, which the operator watches all the same (a report may name any pod).
const bystanderNamespace = "bystanders"

// bystanders creates FLEET_CLUSTER_PODS pods that have nothing to do with Fusebox, shaped
// like an ordinary Deployment's (two containers, environment, probes, resources,
// labels and annotations: about 3 KiB each as the API server stores them), and reads
// how much the operator's heap grew: what its pod cache costs per pod in the cluster.
func (h *harness) bystanders() []row {
	n := h.s.clusterPods
	if n == 0 {
		return nil
	}
	r := row{
		scenario: fmt.Sprintf("operator heap with %d more pods in the cluster, using no breaker (`go_memstats_heap_inuse_bytes`)", n),
		target:   "pod cache ≤ 64 MiB",
	}
	before, err := h.mgr.scrape(h.ctx)
	if err != nil {
		r.measured = "error: " + err.Error()
		return []row{r}
	}
	if _, err := h.cs.CoreV1().Namespaces().Create(h.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: bystanderNamespace}}, metav1.CreateOptions{}); err != nil {
		r.measured = "error: " + err.Error()
		return []row{r}
	}
	start := time.Now()
	if err := h.createPodObjects(bystanderNamespace, n, bystander); err != nil {
		r.measured = "error: " + err.Error()
		return []row{r}
	}
	created := time.Since(start)
	note := h.settle("creating the cluster's pods")
	after, err := h.mgr.scrape(h.ctx)
	if err != nil {
		r.measured = "error: " + err.Error()
		return []row{r}
	}
	grown := after.heapInuse - before.heapInuse
	r.measured = fmt.Sprintf("+%s (%s before, %s after)", mib(grown), mib(before.heapInuse), mib(after.heapInuse))
	r.meets = yesNo(grown <= 64<<20)
	r.notes = fmt.Sprintf("%d pods created in %s; %.0f B of heap per pod; heap_alloc %s → %s; %s",
		n, fmtDur(created), grown/float64(n), mib(before.heapAlloc), mib(after.heapAlloc), note)
	logf("bystanders: %s (%s)", r.measured, r.notes)
	return []row{r}
}

// bystander is the i-th pod of the rest of the cluster.
func bystander(i int) *corev1.Pod {
	env := make([]corev1.EnvVar, 0, 12)
	for k := range 10 {
		env = append(env, corev1.EnvVar{Name: fmt.Sprintf("SETTING_%d", k), Value: fmt.Sprintf("value-%d-of-a-typical-length", k)})
	}
	env = append(env, corev1.EnvVar{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}})
	probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}}, PeriodSeconds: 10}
	res := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("web-%d", i),
			Labels: map[string]string{
				"app.kubernetes.io/name": "web", "app.kubernetes.io/instance": "web-prod",
				"app.kubernetes.io/version": "1.42.0", "pod-template-hash": "7d9f8c6b5",
			},
			Annotations: map[string]string{
				"prometheus.io/scrape": "true", "prometheus.io/port": "9090",
				"kubectl.kubernetes.io/restartedAt": "2026-11-30T09:00:00Z",
			},
		},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{
				{Name: "web", Image: "registry.example/web:1.42.0", Env: env, Resources: res, ReadinessProbe: probe, LivenessProbe: probe,
					Ports:        []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "metrics", ContainerPort: 9090}},
					VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/web"}, {Name: "cache", MountPath: "/var/cache/web"}}},
				{Name: "proxy", Image: "registry.example/proxy:2.3.1", Resources: res,
					Args: []string{"--listen=:15001", "--upstream=127.0.0.1:8080", "--log-level=info"}},
			},
			Volumes: []corev1.Volume{
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "web-config"}}}},
				{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
		},
	}
}
