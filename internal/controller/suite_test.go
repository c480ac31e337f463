package controller

import (
	"context"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/testenv"
)

var (
	cfg       *rest.Config
	k8sClient client.WithWatch // direct, uncached: assertions see the API server itself
	testEnv   *envtest.Environment
	scheme    = runtime.NewScheme()
	// reconciler is the one the manager runs; specs also call it directly.
	reconciler *CircuitBreakerReconciler
	// liveReads counts the reconciler's reads around its cache.
	liveReads *countingReader
)

// countingReader counts the reads it passes on, by namespace.
type countingReader struct {
	client.Reader
	mu    sync.Mutex
	reads map[string]int
}

func (c *countingReader) count(namespace string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reads == nil {
		c.reads = map[string]int{}
	}
	c.reads[namespace]++
}

func (c *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.count(key.Namespace)
	return c.Reader.Get(ctx, key, obj, opts...)
}

func (c *countingReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	var o client.ListOptions
	o.ApplyOptions(opts)
	c.count(o.Namespace)
	return c.Reader.List(ctx, list, opts...)
}

// in is how many reads the reconciler made around its cache in namespace.
func (c *countingReader) in(namespace string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads[namespace]
}

// suiteNodeAgentGrace is the reconciler's grace for a node agent that is not Ready: short,
// so that a spec sees it end.
const suiteNodeAgentGrace = 3 * time.Second

func TestController(t *testing.T) {
	RegisterFailHandler(Fail)
	// The machines that run this suite are shared and loaded: waits are generous, and
	// what is asserted stays exact.
	SetDefaultEventuallyTimeout(60 * time.Second)
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)
	RunSpecs(t, "Controller Suite")
}

var _ = BeforeSuite(func() {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(resiliencev1alpha1.AddToScheme(scheme))

	var err error
	testEnv, err = testenv.New("../..")
	Expect(err).NotTo(HaveOccurred())
	cfg, err = testenv.Start(testEnv)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(testEnv.Stop)
	// The API server's own checks, as config/default installs them.
	Expect(testenv.InstallPolicies(cfg, "../..")).To(Succeed())

	k8sClient, err = client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache:   cache.Options{ByObject: CacheByObject()},
	})
	Expect(err).NotTo(HaveOccurred())
	reconciler = NewReconciler(mgr, NewMetrics(prometheus.NewRegistry()))
	reconciler.NodeAgentGrace = suiteNodeAgentGrace
	liveReads = &countingReader{Reader: reconciler.APIReader}
	reconciler.APIReader = liveReads
	Expect(reconciler.SetupWithManager(mgr)).To(Succeed())

	ctx, cancel := context.WithCancel(context.Background())
	DeferCleanup(cancel)
	go func() {
		defer GinkgoRecover()
		Expect(mgr.Start(ctx)).To(Succeed())
	}()
})
