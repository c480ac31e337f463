package gateserver

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/controller"
	"github.com/fusebox-dev/fusebox/internal/testenv"
)

var (
	cfg       *rest.Config
	k8sClient client.Client // direct, uncached
	clientset *kubernetes.Clientset
	scheme    = runtime.NewScheme()
	// gateURL is the gate's base, https://127.0.0.1:PORT.
	gateURL string
)

func TestGateServer(t *testing.T) {
	RegisterFailHandler(Fail)
	// The machines that run this suite are shared and loaded: waits are generous.
	SetDefaultEventuallyTimeout(60 * time.Second)
	SetDefaultEventuallyPollingInterval(200 * time.Millisecond)
	RunSpecs(t, "Gate Server Suite")
}

var _ = BeforeSuite(func() {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(resiliencev1alpha1.AddToScheme(scheme))

	env, err := testenv.New("../..")
	if err != nil && os.Getenv("CI") == "" {
		Skip("SKIPPED: " + err.Error())
	}
	Expect(err).NotTo(HaveOccurred())
	cfg, err = testenv.Start(env)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(env.Stop)
	k8sClient, err = client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	clientset = kubernetes.NewForConfigOrDie(cfg)

	// The gate as cmd/manager runs it, on the manager's cache, trimmed as the operator's
	// is. No reconciler runs here: each spec writes the status the gate reads.
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{ByObject: controller.CacheByObject()},
	})
	Expect(err).NotTo(HaveOccurred())
	addr := freeAddress()
	srv, err := New(mgr.GetConfig(), mgr.GetHTTPClient(), mgr.GetClient(), Options{BindAddress: addr})
	Expect(err).NotTo(HaveOccurred())
	Expect(mgr.Add(srv)).To(Succeed())
	ctx, cancel := context.WithCancel(context.Background())
	DeferCleanup(cancel)
	go func() {
		defer GinkgoRecover()
		Expect(mgr.Start(ctx)).To(Succeed())
	}()
	gateURL = "https://" + addr
	// The server starts with the manager: wait until it answers at all.
	Eventually(func() error { _, _, err := call(http.MethodGet, gateURL+"/", "", ""); return err }).Should(Succeed())

	// The gate's callers' role as config/rbac ships it.
	var role rbacv1.ClusterRole
	data, err := os.ReadFile(filepath.Join("..", "..", "config", "rbac", "gate_reader_role.yaml"))
	Expect(err).NotTo(HaveOccurred())
	Expect(yaml.Unmarshal(data, &role)).To(Succeed())
	Expect(k8sClient.Create(ctx, &role)).To(Succeed())
})

func freeAddress() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}

// call sends method url with a bearer token (none when "") and body, and returns the
// status code and the body.
func call(method, url, token, body string) (int, string, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	// The gate's certificate is self-signed at start; what is under test is who may
	// read, not who serves.
	c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // see above
	}}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// newNamespace creates a namespace of the spec's own.
func newNamespace(ctx context.Context) string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "gate-"}}
	Expect(k8sClient.Create(ctx, ns)).To(Succeed())
	return ns.Name
}

// serviceAccountToken creates a service account in namespace and returns a token of it.
func serviceAccountToken(ctx context.Context, namespace, name string) string {
	Expect(k8sClient.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}})).To(Succeed())
	tr, err := clientset.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	return tr.Status.Token
}

// bindGateReader binds the fusebox gate-reader ClusterRole to the service account in its
// namespace.
func bindGateReader(ctx context.Context, namespace, serviceAccount string) {
	Expect(k8sClient.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: serviceAccount + "-gate-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "gate-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: serviceAccount, Namespace: namespace}},
	})).To(Succeed())
}

// gatePath is the gate's URL for the breaker namespace/name, with a query.
func gatePath(namespace, name, query string) string {
	u := fmt.Sprintf("%s/v1/namespaces/%s/circuitbreakers/%s/gate", gateURL, namespace, name)
	if query != "" {
		u += "?" + query
	}
	return u
}
