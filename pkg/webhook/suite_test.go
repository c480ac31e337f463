package webhook_test

import (
	"context"
	"crypto/tls"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/testenv"
	"github.com/fusebox-dev/fusebox/internal/testutil"
	"github.com/fusebox-dev/fusebox/pkg/webhook"
)

// The generated webhook configurations, as make manifests writes them.
const manifests = "../../config/webhook/manifests.yaml"

var (
	cfg       *rest.Config
	k8sClient client.Client // direct, uncached: assertions see the API server itself
	testEnv   *envtest.Environment
	scheme    = runtime.NewScheme()
)

func TestWebhooks(t *testing.T) {
	RegisterFailHandler(Fail)
	// The machines that run this suite are shared and loaded: an Eventually without a
	// timeout of its own waits a minute, not Gomega's 1 s, and returns as soon as it holds.
	SetDefaultEventuallyTimeout(time.Minute)
	RunSpecs(t, "Webhook Suite")
}

// The suite's control plane has the generated webhook configurations installed,
// pointing at a local port (envtest rewrites each service reference into a URL
// and sets a caBundle of its own CA), and a manager serving them through
// webhook.Setup in external-certificate mode, as `make run` would.
var _ = BeforeSuite(func() {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(resiliencev1alpha1.AddToScheme(scheme))

	var err error
	testEnv, err = testenv.New("../..")
	Expect(err).NotTo(HaveOccurred())
	testEnv.WebhookInstallOptions = envtest.WebhookInstallOptions{Paths: []string{manifests}}
	cfg, err = testenv.Start(testEnv)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(testEnv.Stop)

	k8sClient, err = client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	// The API server's own policies, as config/default installs them beside the webhooks.
	Expect(testenv.InstallPolicies(cfg, "../..")).To(Succeed())

	wio := testEnv.WebhookInstallOptions
	opts := webhook.DefaultOptions()
	opts.CertMode = webhook.CertModeExternal
	opts.Host, opts.Port, opts.CertDir = wio.LocalServingHost, wio.LocalServingPort, wio.LocalServingCertDir
	opts.SidecarImage = sidecarImage
	opts.Namespace, opts.NodeAgentLookupTTL = operatorNamespace, agentLookupTTL
	startManager(opts)
})

// startManager starts a manager that serves the webhooks as opts say, and
// returns once its webhook server answers TLS; the manager stops with the
// spec (or suite) that started it. tweak, if any, adjusts the manager's options.
func startManager(opts webhook.Options, tweak ...func(*ctrl.Options)) {
	o := ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		WebhookServer:          opts.NewServer(),
	}
	for _, t := range tweak {
		t(&o)
	}
	mgr, err := ctrl.NewManager(cfg, o)
	Expect(err).NotTo(HaveOccurred())
	Expect(webhook.Setup(mgr, opts)).To(Succeed())

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		defer GinkgoRecover()
		Expect(mgr.Start(ctx)).To(Succeed())
	})
	DeferCleanup(func() {
		cancel()
		wg.Wait()
	})
	addr := net.JoinHostPort(opts.Host, strconv.Itoa(opts.Port))
	Eventually(func() error {
		conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
		if err == nil {
			conn.Close()
		}
		return err
	}).Should(Succeed(), "webhook server at %s", addr)
}

func metricsOff() metricsserver.Options { return metricsserver.Options{BindAddress: "0"} }

// newNamespace creates a namespace of the spec's own.
func newNamespace() string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "webhook-"}}
	Expect(k8sClient.Create(context.Background(), ns)).To(Succeed())
	DeferCleanup(func() { _ = k8sClient.Delete(context.Background(), ns) })
	return ns.Name
}

// warningClient returns a direct client whose warnings are recorded.
func warningClient() (client.Client, *testutil.Warnings) {
	w := &testutil.Warnings{}
	c := rest.CopyConfig(cfg)
	c.WarningHandler = w
	cl, err := client.New(c, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	return cl, w
}
