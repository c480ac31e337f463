package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/testenv"
	"github.com/fusebox-dev/fusebox/internal/testutil"
	"github.com/fusebox-dev/fusebox/pkg/breaker/kube"
	"github.com/fusebox-dev/fusebox/pkg/breaker/registry"
)

// TestDeployAndRun applies deploy/app.yaml to a real API server (envtest) with the
// operator's reconciler running, first as a server-side dry run, then for real; runs the
// example as the Deployment's pod would, with the environment its template gives it and
// the credentials of its service account; and checks that the published policy reached
// the breaker and that the pod's BreakerReport and the CircuitBreaker's status follow the
// circuit open and closed again.
func TestDeployAndRun(t *testing.T) {
	ctrllog.SetLogger(logr.Discard()) // the reconciler's log is not this test's to read
	env, err := testenv.New("../..")
	if err != nil {
		t.Fatalf("envtest control plane (run `make envtest` or hack/envtest.sh): %v", err)
	}
	cfg, err := testenv.Start(env)
	if err != nil {
		t.Fatalf("start envtest: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	must(t, testenv.InstallPolicies(cfg, "../..")) // which report a pod may write, as deployed

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(resiliencev1alpha1.AddToScheme(scheme))
	k8s, err := client.New(cfg, client.Options{Scheme: scheme})
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	startOperator(ctx, t, cfg, scheme)
	installBreakerClientRole(ctx, t, k8s)

	// The manifests: the namespace first (a dry run of what goes into it needs it), then
	// every object dry-run, which the API server validates and admits in full without
	// storing it, then every object for real.
	objs, err := testenv.ReadManifests("deploy")
	must(t, err)
	kinds := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		kinds[o.GetKind()] = o
	}
	for _, kind := range []string{"Namespace", "ServiceAccount", "RoleBinding", "CircuitBreaker", "Deployment"} {
		if kinds[kind] == nil {
			t.Fatalf("deploy/app.yaml has no %s", kind)
		}
	}
	apply := func(o *unstructured.Unstructured, opts ...client.ApplyOption) {
		t.Helper()
		opts = append(opts, client.FieldOwner("kubectl"))
		// A copy: Apply writes the API server's answer into the object it is given.
		if err := k8s.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()), opts...); err != nil {
			t.Fatalf("apply %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	apply(kinds["Namespace"])
	for _, o := range objs {
		apply(o, client.DryRunAll)
	}
	for _, o := range objs {
		apply(o)
	}
	ns := kinds["Namespace"].GetName()

	// The pod the Deployment would run (envtest has no controllers and no kubelet), and
	// the environment its template gives the container.
	var deploy appsv1.Deployment
	must(t, runtime.DefaultUnstructuredConverter.FromUnstructured(kinds["Deployment"].Object, &deploy))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: deploy.Name + "-6d9f8-x2x4z", Labels: deploy.Spec.Template.Labels},
		Spec:       deploy.Spec.Template.Spec,
	}
	must(t, k8s.Create(ctx, pod))
	for _, e := range pod.Spec.Containers[0].Env {
		t.Setenv(e.Name, downwardValue(t, pod, e))
	}

	var out, logs testutil.SyncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, &out, func(ctx context.Context) (*registry.Registry, error) {
			return connectAsPod(ctx, cfg, pod, &logs)
		})
	}()
	t.Cleanup(func() {
		t.Logf("output of run:\n%s", &out)
		if t.Failed() {
			t.Logf("log of the pod's connection (pkg/breaker/kube):\n%s", &logs)
		}
	})

	var cb resiliencev1alpha1.CircuitBreaker
	must(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: breakerName}, &cb))
	// Closed, on the published config; then open, and closed again, as the upstream fails
	// and recovers, on the pod's report and on the CircuitBreaker's status alike.
	var report resiliencev1alpha1.BreakerReport
	for _, want := range []resiliencev1alpha1.State{resiliencev1alpha1.StateClosed, resiliencev1alpha1.StateOpen, resiliencev1alpha1.StateClosed} {
		testutil.Eventually(t, 60*time.Second, "the pod reports "+string(want), func() error {
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(pod), &report); err != nil {
				return err
			}
			for _, e := range report.Breakers {
				if e.Name != breakerName {
					continue
				}
				if e.ConfigGeneration != cb.Generation {
					return fmt.Errorf("the pod runs config generation %d, want %d", e.ConfigGeneration, cb.Generation)
				}
				if e.State != want {
					return fmt.Errorf("the pod reports %s, want %s", e.State, want)
				}
				return nil
			}
			return fmt.Errorf("the report has no entry for %s: %+v", breakerName, report.Breakers)
		})
		testutil.Eventually(t, 60*time.Second, "the CircuitBreaker shows "+string(want), func() error {
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(&cb), &cb); err != nil {
				return err
			}
			if cb.Status.State != want {
				return fmt.Errorf("the CircuitBreaker's status says %q, want %s", cb.Status.State, want)
			}
			return nil
		})
		t.Logf("report and status: %s", want)
	}
	if own := report.OwnerReferences; len(own) != 1 || own[0].Kind != "Pod" || own[0].UID != pod.UID {
		t.Errorf("the report is owned by %+v, want the pod %s (UID %s)", own, pod.Name, pod.UID)
	}

	cancel()
	select {
	case err := <-done:
		must(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("run still running 10s after its context was cancelled")
	}
	for _, want := range []string{
		// The CircuitBreaker's spec, not the library's default policy.
		"policy of flaky-upstream: open when 50% of at least 5 calls over 2s fail, for 2s; close after 2 probes",
		"circuit closed, upstream up:",
		"circuit open, upstream down:",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the output lacks %q:\n%s", want, &out)
		}
	}
}

// connectAsPod is kube.FromEnvironment but for the credentials: it reads the same
// environment, and reaches envtest's API server as the pod's service account token would
// (rest.InClusterConfig reads the token and the server's address from files and
// variables only a real pod has).
func connectAsPod(ctx context.Context, cfg *rest.Config, pod *corev1.Pod, logs *testutil.SyncBuffer) (*registry.Registry, error) {
	c := rest.CopyConfig(cfg)
	sa := pod.Spec.ServiceAccountName
	c.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + pod.Namespace + ":" + sa,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + pod.Namespace, "system:authenticated"},
		// What the API server adds for a token bound to a pod, which the admission
		// policy checks.
		Extra: map[string][]string{
			"authentication.kubernetes.io/pod-name": {pod.Name},
			"authentication.kubernetes.io/pod-uid":  {string(pod.UID)},
		},
	}
	return kube.Start(ctx, kube.Options{
		Config:    c,
		Pod:       os.Getenv(kube.EnvPodName),
		PodUID:    os.Getenv(kube.EnvPodUID),
		Namespace: os.Getenv(kube.EnvNamespace),
		Logger:    slog.New(slog.NewTextHandler(logs, nil)),
	})
}

// downwardValue is the value the kubelet gives the environment variable e of pod.
func downwardValue(t *testing.T, pod *corev1.Pod, e corev1.EnvVar) string {
	t.Helper()
	if e.ValueFrom == nil {
		return e.Value
	}
	if f := e.ValueFrom.FieldRef; f != nil {
		switch f.FieldPath {
		case "metadata.name":
			return pod.Name
		case "metadata.namespace":
			return pod.Namespace
		case "metadata.uid":
			return string(pod.UID)
		}
	}
	t.Fatalf("environment variable %s: this test does not know how to resolve %+v", e.Name, e.ValueFrom)
	return ""
}

// startOperator runs the operator's reconciler against cfg until ctx is done: it renders
// the CircuitBreakers into the ConfigMap the pods read, and adds their reports up into
// the status.
func startOperator(ctx context.Context, t *testing.T, cfg *rest.Config, scheme *runtime.Scheme) {
	t.Helper()
	stop, err := testutil.StartOperator(ctx, cfg, scheme)
	must(t, err)
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("manager: %v", err)
		}
	})
}

// installBreakerClientRole creates the ClusterRole config/rbac ships for applications,
// under the name the install gives it (config/default's namePrefix, the chart).
func installBreakerClientRole(ctx context.Context, t *testing.T, k8s client.Client) {
	t.Helper()
	raw, err := os.ReadFile("../../config/rbac/breaker_client_role.yaml")
	must(t, err)
	var role rbacv1.ClusterRole
	must(t, yaml.Unmarshal(raw, &role))
	role.Name = "fusebox-" + role.Name
	must(t, k8s.Create(ctx, &role))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
