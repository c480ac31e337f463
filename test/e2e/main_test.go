// Package e2e runs the operator and in-process application instances together
// against a real kube-apiserver (envtest): the loop of docs/design.md §2, from
// `kubectl apply` to every pod's breaker and from a pod's verdict back to the
// CircuitBreaker's status, conditions and Events.
package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/controller"
	"github.com/fusebox-dev/fusebox/internal/testenv"
	"github.com/fusebox-dev/fusebox/internal/testutil"
	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/kube"
)

var (
	cfg       *rest.Config
	k8sClient client.Client
)

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	// Each test has its namespace; their time goes on waiting for the operator and the
	// instances, and on the breakers' open periods.
	testutil.WaitingParallelism(8)
	if os.Getenv("E2E_LOG") != "" {
		log.SetLogger(zap.New(zap.UseDevMode(true)))
	} else {
		log.SetLogger(logr.Discard())
	}
	env, err := testenv.New("../..")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if cfg, err = testenv.Start(env); err != nil {
		fmt.Fprintln(os.Stderr, "start envtest:", err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	// Which report a pod may write, as config/default installs it.
	if err := testenv.InstallPolicies(cfg, "../.."); err != nil {
		fmt.Fprintln(os.Stderr, "install admission policies:", err)
		return 1
	}

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(resiliencev1alpha1.AddToScheme(scheme))
	if k8sClient, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}

	// The operator, wired as cmd/manager wires it.
	mgrCfg := rest.CopyConfig(cfg)
	mgrCfg.QPS, mgrCfg.Burst = controller.DefaultQPS, controller.DefaultBurst
	if os.Getenv("E2E_TRACE") != "" {
		mgrCfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
			return roundTripFunc(func(r *http.Request) (*http.Response, error) {
				t := time.Now()
				resp, err := rt.RoundTrip(r)
				if r.URL.Query().Get("watch") != "true" {
					fmt.Fprintf(os.Stderr, "TRACE %s %s %s %s\n", t.Format("15:04:05.000"), time.Since(t).Round(time.Millisecond), r.Method, r.URL.Path)
				}
				return resp, err
			})
		}
	}
	stop, err := testutil.StartOperator(context.Background(), mgrCfg, scheme)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	if err := stop(); err != nil {
		fmt.Fprintln(os.Stderr, "manager:", err)
	}
	return code
}

// instance is one application "pod": its own registry, wired by kube.Start.
type instance struct {
	pod   string
	agent *kube.Connection
}

func (i *instance) breaker(name string) *breaker.Breaker { return i.agent.Registry().Get(name) }

// startInstances creates n pods app-0 … app-(n-1) and an instance for each.
func startInstances(t testing.TB, ns string, n int) []*instance {
	t.Helper()
	var out []*instance
	for i := range n {
		out = append(out, startInstance(t, ns, fmt.Sprintf("app-%d", i), nil))
	}
	return out
}

// startInstance creates the Pod pod (the object only: envtest has no kubelet) and an
// in-process instance for it that is given the Pod's UID as the injection webhook's
// POD_UID gives it; modify, if not nil, changes its options. It stops at the end of the
// test.
func startInstance(t testing.TB, ns, pod string, modify func(*kube.Options)) *instance {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	if err := k8sClient.Create(ctx, p); err != nil {
		cancel()
		t.Fatal(err)
	}
	o := kube.Options{
		Config: cfg, Namespace: ns, Pod: pod, PodUID: string(p.UID),
		Logger: slog.New(slog.DiscardHandler),
	}
	if modify != nil {
		modify(&o)
	}
	agent, err := kube.Connect(ctx, o)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		<-agent.Done()
	})
	return &instance{pod: pod, agent: agent}
}

func newNamespace(t testing.TB) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-"}}
	if err := k8sClient.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}
