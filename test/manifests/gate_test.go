package manifests

import (
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/fusebox-dev/fusebox/internal/gateserver"
)

// config/default serves the rollout gate on the manager's gate port behind the
// fusebox-gate Service, and ships a role for its callers that grants what the gate asks
// the API server about and nothing else (docs/rollouts.md).
func TestDefaultServesTheGate(t *testing.T) {
	objs := kustomizeBuild(t, "config/default")

	var dep appsv1.Deployment
	find(t, objs, "Deployment", "fusebox-controller-manager", &dep)
	c := dep.Spec.Template.Spec.Containers[0]
	bind := ""
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--gate-bind-address="); ok {
			bind = v
		}
	}
	if bind != gateserver.DefaultBindAddress {
		t.Errorf("manager args %q: want --gate-bind-address=%s", c.Args, gateserver.DefaultBindAddress)
	}
	var port *corev1.ContainerPort
	for i := range c.Ports {
		if c.Ports[i].Name == "gate" {
			port = &c.Ports[i]
		}
	}
	if port == nil || ":"+strconv.Itoa(int(port.ContainerPort)) != bind {
		t.Errorf("manager ports %+v: want one named gate on %s", c.Ports, bind)
	}

	var svc corev1.Service
	find(t, objs, "Service", "fusebox-gate", &svc)
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.StrVal != "gate" || svc.Spec.Ports[0].Port != 8444 {
		t.Errorf("gate Service ports %+v, want 8444 targeting the manager's gate port", svc.Spec.Ports)
	}
	for k, v := range svc.Spec.Selector {
		if dep.Spec.Template.Labels[k] != v {
			t.Errorf("gate Service selects %s=%s, which the manager's pods do not carry", k, v)
		}
	}

	var reader rbacv1.ClusterRole
	find(t, objs, "ClusterRole", "fusebox-gate-reader", &reader)
	if len(reader.Rules) != 1 || strings.Join(reader.Rules[0].Resources, ",") != "circuitbreakers" ||
		strings.Join(reader.Rules[0].Verbs, ",") != "get" || strings.Join(reader.Rules[0].APIGroups, ",") != "resilience.fusebox.dev" {
		t.Errorf("gate-reader grants %+v, want get on circuitbreakers only", reader.Rules)
	}
}
