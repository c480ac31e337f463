package localcluster

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// Apply is what `make run` applies the samples with: every object of every
// YAML file, kustomize's files left out, the namespace defaulted, and applied
// again without complaint.
func TestApplyAppliesEveryObjectOfTheDirectory(t *testing.T) {
	cluster, err := Start("../..", filepath.Join(t.TempDir(), "kubeconfig"))
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skipf("SKIPPED: no control plane (run hack/envtest.sh, or set KUBEBUILDER_ASSETS): %v", err)
	}
	t.Cleanup(func() { _ = cluster.Stop() })
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(resiliencev1alpha1.AddToScheme(scheme))
	cl, err := client.New(cluster.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("breakers.yaml", `apiVersion: resilience.fusebox.dev/v1alpha1
kind: CircuitBreaker
metadata:
  name: payments-api
spec:
  mode: ForcedOpen
---
# an empty document between two objects
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: kube-public
data:
  a: b
`)
	write("kustomization.yaml", "resources: [breakers.yaml]\n")

	ctx := context.Background()
	for range 2 {
		applied, err := Apply(ctx, cl, dir)
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"circuitbreaker/payments-api", "configmap/settings"}; !reflect.DeepEqual(applied, want) {
			t.Errorf("applied %v, want %v", applied, want)
		}
	}
	var cb resiliencev1alpha1.CircuitBreaker
	if err := cl.Get(ctx, client.ObjectKey{Namespace: "default", Name: "payments-api"}, &cb); err != nil {
		t.Fatalf("the breaker that named no namespace, in default: %v", err)
	}
	if cb.Spec.Mode != resiliencev1alpha1.ModeForcedOpen {
		t.Errorf("spec.mode %q, want ForcedOpen", cb.Spec.Mode)
	}
	var cm corev1.ConfigMap
	if err := cl.Get(ctx, client.ObjectKey{Namespace: "kube-public", Name: "settings"}, &cm); err != nil {
		t.Errorf("the ConfigMap in the namespace it names: %v", err)
	}

	write("broken.yaml", "kind: [\n")
	if _, err := Apply(ctx, cl, dir); err == nil {
		t.Error("a file that is not YAML: want an error")
	}
}
