package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/fusebox-dev/fusebox/internal/testenv"
)

// An install the API server accepts: both install paths of the README, on
// envtest's kube-apiserver with nothing installed beforehand. envtest runs no
// controller-manager, so the Deployment is stored but never runs, and a
// deleted Namespace stays Terminating (nothing empties it).
func TestInstallOnAnAPIServer(t *testing.T) {
	assets, err := testenv.AssetsDir()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skipf("SKIPPED: %v", err)
	}
	kustomize := kustomizeBin(t)
	env := &envtest.Environment{BinaryAssetsDirectory: assets}
	cfg, err := testenv.Start(env)
	if err != nil {
		t.Fatalf("start envtest: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	cl := newClient(t, cfg)
	ctx := context.Background()

	t.Run("kustomize", func(t *testing.T) {
		// make deploy: kustomize build config/default | kubectl apply --server-side -f -
		objs := kustomizeObjects(t, kustomize, filepath.Join(repoRoot, "config", "default"))
		apply(ctx, t, cl, objs)
		checkInstalled(ctx, t, cl, objs)
		// make undeploy: the same manifests, kubectl delete --ignore-not-found.
		remove(ctx, t, cl, objs)
	})

	t.Run("helm", func(t *testing.T) {
		// helm install --create-namespace: the namespace, then crds/, then
		// the templates. The admission policies (if config/ has any) and the node
		// agent are on.
		const ns = "fusebox-helm"
		objs, err := helmTemplate(t, ns, map[string]any{"admissionPolicy": map[string]any{"enabled": true}, "nodeAgent": map[string]any{"enabled": true}})
		if err != nil {
			t.Fatal(err)
		}
		namespace := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns}}}
		apply(ctx, t, cl, append([]*unstructured.Unstructured{namespace}, objs...))
		checkInstalled(ctx, t, cl, objs)
		// helm uninstall deletes the templates' objects and keeps the CRDs.
		var templates []*unstructured.Unstructured
		for _, u := range objs {
			if u.GetKind() != "CustomResourceDefinition" {
				templates = append(templates, u)
			}
		}
		remove(ctx, t, cl, templates)
	})
}

func newClient(t *testing.T, cfg *rest.Config) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

func kustomizeObjects(t *testing.T, bin, dir string) []*unstructured.Unstructured {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "build", dir)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kustomize build %s: %v\n%s", dir, err, stderr.String())
	}
	return decode(t, out)
}

// apply is kubectl apply --server-side, in the given order; an object whose
// kind a CRD of this install defines waits for that CRD to be established.
func apply(ctx context.Context, t *testing.T, cl client.Client, objs []*unstructured.Unstructured) {
	t.Helper()
	for _, u := range objs {
		u := u.DeepCopy()
		var err error
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			err = cl.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("kubectl"), client.ForceOwnership)
			if err == nil || !meta.IsNoMatchError(err) || time.Now().After(deadline) {
				break
			}
		}
		if err != nil {
			t.Errorf("the API server refused %s %s: %v", u.GetKind(), describe(u), err)
		}
	}
}

func checkInstalled(ctx context.Context, t *testing.T, cl client.Client, objs []*unstructured.Unstructured) {
	t.Helper()
	kinds := map[string]int{}
	for _, u := range objs {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(u.GroupVersionKind())
		if err := cl.Get(ctx, client.ObjectKeyFromObject(u), got); err != nil {
			t.Errorf("%s %s was not stored: %v", u.GetKind(), describe(u), err)
			continue
		}
		kinds[u.GetKind()]++
		if u.GetKind() == "CustomResourceDefinition" {
			waitEstablished(ctx, t, cl, u.GetName())
		}
	}
	for _, k := range []string{"CustomResourceDefinition", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
		"Deployment", "DaemonSet", "Service", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "FlowSchema", "PriorityLevelConfiguration"} {
		if kinds[k] == 0 {
			t.Errorf("the install holds no %s", k)
		}
	}
	t.Logf("installed %d objects: %v", len(objs), kinds)
}

func waitEstablished(ctx context.Context, t *testing.T, cl client.Client, name string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := cl.Get(ctx, client.ObjectKey{Name: name}, &crd); err == nil {
			for _, c := range crd.Status.Conditions {
				if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Errorf("CRD %s never became Established", name)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// remove is kubectl delete --ignore-not-found on the same objects, then waits
// until each is gone; a Namespace only has to be Terminating.
func remove(ctx context.Context, t *testing.T, cl client.Client, objs []*unstructured.Unstructured) {
	t.Helper()
	background := metav1.DeletePropagationBackground
	for _, u := range objs {
		if err := cl.Delete(ctx, u.DeepCopy(), &client.DeleteOptions{PropagationPolicy: &background}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete %s %s: %v", u.GetKind(), describe(u), err)
		}
	}
	// A wait for the deletes to finish, not a bound on their speed: a CRD goes only when the
	// API server's own finalizer has cleaned up its resource, which a busy machine delays
	// (once past 60 s in a warm .ci/run, with the cluster suite and lint beside it).
	deadline := time.Now().Add(3 * time.Minute)
	for _, u := range objs {
		for {
			got := &unstructured.Unstructured{}
			got.SetGroupVersionKind(u.GroupVersionKind())
			err := cl.Get(ctx, client.ObjectKeyFromObject(u), got)
			if apierrors.IsNotFound(err) || (err == nil && u.GetKind() == "Namespace" && got.GetDeletionTimestamp() != nil) {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("%s %s is still there after delete (err %v)", u.GetKind(), describe(u), err)
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

func describe(u *unstructured.Unstructured) string {
	if u.GetNamespace() == "" {
		return u.GetName()
	}
	return fmt.Sprintf("%s/%s", u.GetNamespace(), u.GetName())
}
