package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/testenv"
	"github.com/fusebox-dev/fusebox/internal/testutil"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/kube"
)

// The plugin's tests run it, in-process, against a real kube-apiserver and
// etcd (envtest) with the real operator, so the status they show is what the
// controller wrote from pods' reports.
var (
	k8sClient  client.Client // direct, uncached: what the API server holds
	restConfig *rest.Config  // the admin's, which k8sClient uses
	kubeconfig string        // the file the commands are given with --kubeconfig
	envErr     error         // why the control plane did not start
)

// wait bounds every wait for the operator; the machines are shared and loaded.
const wait = 60 * time.Second

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	ctrllog.SetLogger(logr.Discard())
	env, err := testenv.New("../..")
	var cfg *rest.Config
	if err == nil {
		cfg, err = testenv.Start(env)
	}
	if err != nil {
		envErr = err
		fmt.Fprintf(os.Stderr, "\n*** envtest control plane not started: %v\n*** the tests that need it fail\n\n", err)
		return m.Run()
	}
	defer func() { _ = env.Stop() }()
	restConfig = cfg
	dir, err := os.MkdirTemp("", "fusebox-plugin-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := writeKubeconfig(cfg, kubeconfig); err != nil {
		panic(err)
	}
	if k8sClient, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		panic(err)
	}

	// The operator, wired as cmd/manager wires it.
	stop, err := testutil.StartOperator(context.Background(), cfg, scheme)
	if err != nil {
		panic(err)
	}
	code := m.Run()
	if err := stop(); err != nil {
		fmt.Fprintln(os.Stderr, "manager:", err)
	}
	return code
}

// writeKubeconfig writes cfg as a kubeconfig file, as a user's would be.
func writeKubeconfig(cfg *rest.Config, path string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin", Namespace: "default"}
	kc.CurrentContext = "envtest"
	return clientcmd.WriteToFile(*kc, path)
}

func needEnv(t *testing.T) {
	t.Helper()
	if envErr != nil {
		t.Fatalf("envtest control plane not started (run `make envtest` or hack/envtest.sh): %v", envErr)
	}
}

// kubectlFusebox runs the plugin with args, as `kubectl fusebox args...` on
// the envtest cluster would, and returns what it printed.
func kubectlFusebox(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	var out, errOut testutil.SyncBuffer
	err = start(ctx, &out, &errOut, args...)
	return out.String(), errOut.String(), err
}

// start runs the plugin with its output going to out and errOut, until it
// returns or ctx ends.
func start(ctx context.Context, out, errOut *testutil.SyncBuffer, args ...string) error {
	return startWith(ctx, nil, out, errOut, args...)
}

// startWith is start with the node agents reached through fetch (nil: pods/proxy).
func startWith(ctx context.Context, fetch agentFetcher, out, errOut *testutil.SyncBuffer, args ...string) error {
	cmd := newCommand(&Options{
		Flags:      genericclioptions.NewConfigFlags(true),
		IOStreams:  genericiooptions.IOStreams{In: strings.NewReader(""), Out: out, ErrOut: errOut},
		Now:        time.Now,
		fetchAgent: fetch,
	})
	cmd.SetArgs(append([]string{"--kubeconfig", kubeconfig}, args...))
	return cmd.ExecuteContext(ctx)
}

func newNamespace(t *testing.T, name string) string {
	t.Helper()
	needEnv(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if name == "" {
		ns.GenerateName = "plugin-"
	}
	if err := k8sClient.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func createBreaker(t *testing.T, ns, name string, edit func(*resiliencev1alpha1.CircuitBreakerSpec)) {
	t.Helper()
	cb := &resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if edit != nil {
		edit(&cb.Spec)
	}
	if err := k8sClient.Create(context.Background(), cb); err != nil {
		t.Fatal(err)
	}
}

func getBreaker(t *testing.T, ns, name string) *resiliencev1alpha1.CircuitBreaker {
	t.Helper()
	var cb resiliencev1alpha1.CircuitBreaker
	if err := k8sClient.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &cb); err != nil {
		t.Fatal(err)
	}
	return &cb
}

// entry is one breaker's line in a pod's report.
func entry(breaker string, state resiliencev1alpha1.State, reason string) breakerconfig.ReportEntry {
	return breakerconfig.ReportEntry{Name: breaker, State: string(state), Since: breakerconfig.NewTime(time.Now()), Reason: reason, ConfigGeneration: 1}
}

// tripped is an Open entry reached on the pod's own calls.
func tripped(breaker string) breakerconfig.ReportEntry {
	e := entry(breaker, resiliencev1alpha1.StateOpen, "Tripped")
	calls, rate := int64(40), int32(60)
	e.Calls, e.FailureRatePercent = &calls, &rate
	return e
}

// report makes pod (created first, Running, when missing) report entries, as
// its agent does: a server-side apply of the BreakerReport named after it,
// owned by the Pod.
func report(t *testing.T, ns, pod string, entries ...breakerconfig.ReportEntry) {
	t.Helper()
	ctx := context.Background()
	p := &corev1.Pod{}
	err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: pod}, p)
	if apierrors.IsNotFound(err) {
		p = &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
		}
		if err = k8sClient.Create(ctx, p); err == nil {
			// envtest runs no kubelet: the phase is set as one would.
			p.Status.Phase = corev1.PodRunning
			err = k8sClient.Status().Update(ctx, p)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(entries)
	if err != nil {
		t.Fatal(err)
	}
	var breakers []any
	if err := json.Unmarshal(raw, &breakers); err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": resiliencev1alpha1.GroupVersion.String(),
		"kind":       breakerconfig.ReportKind,
		"metadata": map[string]any{
			"name": pod, "namespace": ns,
			"ownerReferences": []any{map[string]any{"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": string(p.UID)}},
		},
		"breakers": breakers,
	}}
	if err := k8sClient.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(kube.FieldManager), client.ForceOwnership); err != nil {
		t.Fatal(err)
	}
}

// waitState waits until the operator shows the breaker in state with the
// given open/half-open/closed pods.
func waitState(t *testing.T, ns, name string, state resiliencev1alpha1.State, open, halfOpen, closed int32) {
	t.Helper()
	testutil.Eventually(t, wait, fmt.Sprintf("%s/%s is %s with %d/%d/%d pods", ns, name, state, open, halfOpen, closed), func() error {
		var cb resiliencev1alpha1.CircuitBreaker
		if err := k8sClient.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &cb); err != nil {
			return err
		}
		c := cb.Status.MemberCounts
		if cb.Status.State != state || c == nil || c.Open != open || c.HalfOpen != halfOpen || c.Closed != closed {
			return fmt.Errorf("state %q counts %+v", cb.Status.State, c)
		}
		return nil
	})
}

// setOverride writes spec.override directly, as another client would.
func setOverride(t *testing.T, ns, name string, mode resiliencev1alpha1.Mode, until time.Time, reason string) {
	t.Helper()
	cb := getBreaker(t, ns, name)
	patch := client.MergeFrom(cb.DeepCopy())
	cb.Spec.Override = &resiliencev1alpha1.Override{Mode: mode, Until: metav1.NewTime(until), Reason: reason}
	if err := k8sClient.Patch(context.Background(), cb, patch); err != nil {
		t.Fatal(err)
	}
}

func metaTime(t time.Time) metav1.Time { return metav1.NewTime(t) }
