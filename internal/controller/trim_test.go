package controller

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// fullPod is a pod as the API server serves it: a spec and a status the operator never
// reads besides what trimPod keeps.
func fullPod(namespace, name string, labels map[string]string, wired bool) *corev1.Pod {
	env := []corev1.EnvVar{{Name: "LOG_LEVEL", Value: "debug"}}
	if wired {
		env = append(env, corev1.EnvVar{Name: breakerconfig.EnvNodeAgent, Value: "http://fusebox-node.fusebox-system.svc:8799"})
	}
	since := metav1.NewTime(time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC))
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace, Name: name, UID: types.UID("uid-" + name), ResourceVersion: "42", Labels: labels,
			Annotations: map[string]string{"note": "dropped"}, CreationTimestamp: since,
		},
		Spec: corev1.PodSpec{
			NodeName: "node-a", ServiceAccountName: "app",
			Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1", Env: env}},
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: "10.0.0.7",
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
				{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: since},
			},
		},
	}
}

func trimmed(t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	out, err := trimPod(pod)
	if err != nil {
		t.Fatal(err)
	}
	return out.(*corev1.Pod)
}

// TestTrimPodKeepsWhatTheReconcilerReads: the operator's cache holds a trimmed copy of
// every pod of the cluster; what the reconciler decides from must survive the trim, and
// what it never reads must not be kept.
func TestTrimPodKeepsWhatTheReconcilerReads(t *testing.T) {
	app := trimmed(t, fullPod("shop", "checkout-1", map[string]string{"app": "checkout", "pod-template-hash": "7d9f5c"}, true))
	switch {
	case app.Name != "checkout-1" || app.Namespace != "shop" || app.UID != "uid-checkout-1" || app.ResourceVersion != "42":
		t.Errorf("identity lost: %s/%s %s rv %s", app.Namespace, app.Name, app.UID, app.ResourceVersion)
	case app.Spec.NodeName != "node-a" || app.Status.Phase != corev1.PodRunning:
		t.Errorf("node or phase lost: %q %q", app.Spec.NodeName, app.Status.Phase)
	case resiliencev1alpha1.RevisionOf(app.Labels) != "7d9f5c" || app.Labels["app"] != "checkout":
		t.Errorf("labels lost: %v", app.Labels)
	case !wiredToAgent(app):
		t.Error("a wired pod no longer reads as wired to its agent")
	case app.Annotations != nil || app.Spec.ServiceAccountName != "" || app.Status.PodIP != "":
		t.Errorf("kept what no one reads: %v %q %q", app.Annotations, app.Spec.ServiceAccountName, app.Status.PodIP)
	case app.Status.Conditions != nil:
		t.Errorf("an application pod's conditions are never read, but were kept: %v", app.Status.Conditions)
	}
	if plain := trimmed(t, fullPod("shop", "batch-1", nil, false)); wiredToAgent(plain) || plain.Spec.Containers != nil {
		t.Errorf("a pod not wired to its agent reads as wired: %v", plain.Spec.Containers)
	}

	agent := trimmed(t, fullPod(DefaultOperatorNamespace, "fusebox-node-x1", map[string]string{
		resiliencev1alpha1.LabelAppName: resiliencev1alpha1.AppName, resiliencev1alpha1.LabelAppComponent: resiliencev1alpha1.ComponentNodeAgent,
	}, false))
	ready := podReady(agent)
	if ready == nil || ready.Status != corev1.ConditionTrue || ready.LastTransitionTime.IsZero() || len(agent.Status.Conditions) != 1 {
		t.Errorf("a node agent's Ready condition is what counts its node, but the trim kept %v", agent.Status.Conditions)
	}
	if counts, _ := agentCounted([]*corev1.Pod{agent}, time.Time{}, time.Now(), time.Second); !counts {
		t.Error("a Ready node agent, trimmed, does not count its node")
	}
}

// TestTrimPodAllocatesOnlyThePod: at 100,000 pods every byte a trimmed pod holds is 100 KB
// of the operator's memory (docs/benchmarks.md, "Node agents"). A wired application pod
// costs the pod object and nothing else the trim could share.
func TestTrimPodAllocatesOnlyThePod(t *testing.T) {
	pod := fullPod("shop", "checkout-1", map[string]string{"app": "checkout"}, true)
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := trimPod(pod); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 1 {
		t.Errorf("trimming a wired application pod allocates %.0f times, want 1 (the pod)", allocs)
	}
}
