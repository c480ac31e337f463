package webhook_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	neturl "net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/webhook"
	"github.com/fusebox-dev/fusebox/pkg/webhook/certs"
)

func freePort() int {
	GinkgoHelper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// servedCert returns the serving certificate the server at port presents.
func servedCert(port int) (*x509.Certificate, error) {
	conn, err := tls.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0], nil
}

func parseCerts(data []byte) []*x509.Certificate {
	GinkgoHelper()
	var out []*x509.Certificate
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return out
		}
		c, err := x509.ParseCertificate(block.Bytes)
		Expect(err).NotTo(HaveOccurred())
		out = append(out, c)
	}
}

// caBundles returns the caBundle of every webhook of the two configurations.
func caBundles(ctx context.Context, mutating, validating string) [][]byte {
	GinkgoHelper()
	var m admissionregistrationv1.MutatingWebhookConfiguration
	Expect(k8sClient.Get(ctx, client.ObjectKey{Name: mutating}, &m)).To(Succeed())
	var v admissionregistrationv1.ValidatingWebhookConfiguration
	Expect(k8sClient.Get(ctx, client.ObjectKey{Name: validating}, &v)).To(Succeed())
	var out [][]byte
	for _, w := range m.Webhooks {
		out = append(out, w.ClientConfig.CABundle)
	}
	for _, w := range v.Webhooks {
		out = append(out, w.ClientConfig.CABundle)
	}
	return out
}

// verifyServed checks that the server at port presents a certificate for
// 127.0.0.1 that chains to caBundle, and returns it.
func verifyServed(g Gomega, port int, caBundle []byte) *x509.Certificate {
	cert, err := servedCert(port)
	g.Expect(err).NotTo(HaveOccurred())
	pool := x509.NewCertPool()
	g.Expect(pool.AppendCertsFromPEM(caBundle)).To(BeTrue())
	_, err = cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: "127.0.0.1"})
	g.Expect(err).NotTo(HaveOccurred())
	return cert
}

var _ = Describe("Self-signed certificates", func() {
	ctx := context.Background()

	// Two replicas under leader election share one Secret: each serves, one
	// rotates. The generated webhook configurations are copied with an empty
	// caBundle, pointed at the first replica and scoped to the spec's namespace,
	// so that only the self-signed chain can make the API server call them.
	It("issues a certificate, makes the API server trust it, and rotates it on every replica", func() {
		ns := newNamespace()
		ports := []int{freePort(), freePort()}
		// envtest rewrote the configurations' service references into URLs of
		// the suite's server; keep their paths, point them at replica 0.
		url := func(was *string) *string {
			u, err := neturl.Parse(*was)
			Expect(err).NotTo(HaveOccurred())
			return ptr.To(fmt.Sprintf("https://127.0.0.1:%d/%s", ports[0], strings.TrimLeft(u.Path, "/")))
		}
		var mutating *admissionregistrationv1.MutatingWebhookConfiguration
		for _, c := range testEnv.WebhookInstallOptions.MutatingWebhooks {
			mutating = c.DeepCopy()
		}
		var validating *admissionregistrationv1.ValidatingWebhookConfiguration
		for _, c := range testEnv.WebhookInstallOptions.ValidatingWebhooks {
			validating = c.DeepCopy()
		}
		scope := &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}
		mutating.ObjectMeta = metav1.ObjectMeta{Name: "self-signed-mutating-" + ns}
		for i := range mutating.Webhooks {
			w := &mutating.Webhooks[i]
			w.ClientConfig.URL, w.ClientConfig.CABundle, w.NamespaceSelector = url(w.ClientConfig.URL), nil, scope
		}
		validating.ObjectMeta = metav1.ObjectMeta{Name: "self-signed-validating-" + ns}
		for i := range validating.Webhooks {
			w := &validating.Webhooks[i]
			w.ClientConfig.URL, w.ClientConfig.CABundle, w.NamespaceSelector = url(w.ClientConfig.URL), nil, scope
		}
		Expect(*validating.Webhooks[0].FailurePolicy).To(Equal(admissionregistrationv1.Fail))
		Expect(k8sClient.Create(ctx, mutating)).To(Succeed())
		DeferCleanup(func() { _ = k8sClient.Delete(ctx, mutating) })
		Expect(k8sClient.Create(ctx, validating)).To(Succeed())
		DeferCleanup(func() { _ = k8sClient.Delete(ctx, validating) })

		createBreaker := func() error {
			return k8sClient.Create(ctx, &resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{GenerateName: "cb-", Namespace: ns}})
		}
		// Control: the copies are consulted, and nobody serves them yet.
		Eventually(createBreaker).Should(MatchError(ContainSubstring(`failed calling webhook "validate.circuitbreakers.resilience.fusebox.dev"`)))

		certDirs := []string{GinkgoT().TempDir(), GinkgoT().TempDir()}
		for i := range 2 {
			opts := webhook.DefaultOptions()
			opts.CertMode = webhook.CertModeSelfSigned
			opts.Host, opts.Port, opts.CertDir = "127.0.0.1", ports[i], certDirs[i]
			opts.Namespace, opts.ExtraSANs = ns, []string{"127.0.0.1"}
			opts.MutatingWebhookConfiguration, opts.ValidatingWebhookConfiguration = mutating.Name, validating.Name
			// A CA renewed every 8s, trusted 2s before it signs, and a serving
			// certificate renewed every 2s.
			opts.CAValidity, opts.CertValidity, opts.PropagationDelay = 12*time.Second, 3*time.Second, 2*time.Second
			startManager(opts, func(o *ctrl.Options) {
				o.LeaderElection = true
				o.LeaderElectionID = "webhook-certs-test"
				o.LeaderElectionNamespace = ns
				o.LeaderElectionReleaseOnCancel = true
				o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = ptr.To(4*time.Second), ptr.To(2*time.Second), ptr.To(200*time.Millisecond)
			})
		}

		var secret corev1.Secret
		Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: webhook.DefaultSecretName}, &secret)).To(Succeed())
		Expect(secret.Type).To(Equal(corev1.SecretTypeTLS))
		Expect(secret.Data).To(HaveKey(corev1.TLSCertKey))
		Expect(secret.Data).To(HaveKey(corev1.TLSPrivateKeyKey))
		Expect(secret.Data).To(HaveKey(certs.CACertKey))
		Expect(secret.Data).To(HaveKey(certs.CAKeyKey))
		for _, dir := range certDirs {
			_, err := tls.LoadX509KeyPair(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
			Expect(err).NotTo(HaveOccurred(), "certificate files in %s", dir)
		}

		// The leader sets every webhook's caBundle to the Secret's ca.crt; both
		// replicas serve the Secret's certificate; the API server calls them.
		trusted := func(g Gomega) []*x509.Certificate {
			var s corev1.Secret
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(&secret), &s)).To(Succeed())
			bundles := caBundles(ctx, mutating.Name, validating.Name)
			g.Expect(bundles).To(HaveLen(len(mutating.Webhooks) + len(validating.Webhooks)))
			for _, b := range bundles {
				g.Expect(b).To(Equal(s.Data[certs.CACertKey]))
			}
			var served []*x509.Certificate
			for _, port := range ports {
				served = append(served, verifyServed(g, port, bundles[0]))
			}
			g.Expect(served[0].SerialNumber).To(Equal(served[1].SerialNumber), "both replicas serve the one certificate")
			return served
		}
		var first *x509.Certificate
		Eventually(func(g Gomega) { first = trusted(g)[0] }).Should(Succeed())
		Eventually(createBreaker).Should(Succeed())

		By("rotating the serving certificate")
		Eventually(func(g Gomega) {
			g.Expect(trusted(g)[0].SerialNumber).NotTo(Equal(first.SerialNumber))
		}).WithTimeout(20 * time.Second).Should(Succeed())
		Eventually(createBreaker).Should(Succeed())

		By("rotating the CA: trusted first, signing after the propagation delay")
		firstCA := parseCerts(caBundles(ctx, mutating.Name, validating.Name)[0])[0]
		Eventually(func(g Gomega) {
			leaf := trusted(g)[0]
			cas := parseCerts(caBundles(ctx, mutating.Name, validating.Name)[0])
			g.Expect(cas).To(HaveLen(2))
			g.Expect(cas[1].SerialNumber).To(Equal(firstCA.SerialNumber), "the old CA stays trusted")
			g.Expect(leaf.CheckSignatureFrom(cas[0])).To(Succeed(), "served by the new CA")
		}).WithTimeout(30 * time.Second).Should(Succeed())
		Eventually(createBreaker).Should(Succeed())

		By("putting back a caBundle someone reset")
		var v admissionregistrationv1.ValidatingWebhookConfiguration
		Expect(k8sClient.Get(ctx, client.ObjectKey{Name: validating.Name}, &v)).To(Succeed())
		v.Webhooks[0].ClientConfig.CABundle = nil
		Expect(k8sClient.Update(ctx, &v)).To(Succeed())
		Eventually(func(g Gomega) { trusted(g) }).Should(Succeed())
		Eventually(createBreaker).Should(Succeed())
	})

	It("refuses to start without the operator's namespace", func() {
		opts := webhook.DefaultOptions()
		opts.CertMode, opts.Namespace, opts.CertDir = webhook.CertModeSelfSigned, "", GinkgoT().TempDir()
		mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme, Metrics: metricsOff(), HealthProbeBindAddress: "0"})
		Expect(err).NotTo(HaveOccurred())
		Expect(webhook.Setup(mgr, opts)).To(MatchError(ContainSubstring("namespace")))
		_, err = os.Stat(filepath.Join(opts.CertDir, "tls.crt"))
		Expect(os.IsNotExist(err)).To(BeTrue())
	})
})
