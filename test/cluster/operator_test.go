package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"helm.sh/helm/v3/pkg/release"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

var managerLabels = client.MatchingLabels{"app.kubernetes.io/name": "fusebox", "control-plane": "controller-manager"}

const (
	managerDeployment = "fusebox-controller-manager"
	webhookService    = "fusebox-webhook-service"
	webhookSecret     = "fusebox-webhook-server-cert"
	metricsService    = "fusebox-controller-manager-metrics-service"
	metricsReaderRole = "fusebox-metrics-reader"
	// A namespace of the suite's own, for what it creates beside the example.
	suiteNamespace = "fusebox-e2e"
)

// waitManagers waits until exactly n manager pods exist, none of them on its way out,
// every one Ready and running ref, and returns them.
func waitManagers(ctx context.Context, n int, ref string, timeout time.Duration) []corev1.Pod {
	GinkgoHelper()
	var ready []corev1.Pod
	Eventually(func(g Gomega) {
		var list corev1.PodList
		g.Expect(k8s.List(ctx, &list, client.InNamespace(operatorNamespace), managerLabels)).To(Succeed())
		g.Expect(list.Items).To(HaveLen(n), "manager pods: %v", podNames(list.Items))
		for i := range list.Items {
			p := &list.Items[i]
			g.Expect(p.DeletionTimestamp).To(BeNil(), "pod %s is terminating", p.Name)
			g.Expect(p.Spec.Containers[0].Image).To(Equal(ref), "pod %s", p.Name)
			g.Expect(podReady(p)).To(BeTrue(), "pod %s is not Ready: %+v", p.Name, p.Status.ContainerStatuses)
		}
		ready = list.Items
	}).WithContext(ctx).WithTimeout(timeout).WithPolling(250 * time.Millisecond).Should(Succeed())
	return ready
}

func podNames(ps []corev1.Pod) string { return strings.Join(names(ps), ", ") }

func installSpecs() {
	It("installs from dist/chart with the image just built, and the operator pod becomes Ready", func(ctx SpecContext) {
		ref := need("FUSEBOX_IMAGE (-image)", *image)
		start := time.Now()
		rel := helmInstall(imageValues(ref))
		Expect(rel.Info.Status).To(Equal(release.StatusDeployed))
		managers := waitManagers(ctx, 1, ref, 3*time.Minute)
		record("helm install → operator pod Ready", time.Since(start), "1 replica, readiness probe after 5 s, every 10 s")

		// What the chart promises about the container, seen on the running pod.
		p := managers[0]
		Expect(p.Status.ContainerStatuses[0].ImageID).NotTo(BeEmpty())
		sc := p.Spec.Containers[0].SecurityContext
		Expect(sc.ReadOnlyRootFilesystem).To(HaveValue(BeTrue()))
		Expect(sc.RunAsNonRoot).To(HaveValue(BeTrue()))
		Expect(restarts(&p)).To(BeZero(), "the manager restarted")
	}, SpecTimeout(4*time.Minute))

	It("serves its webhooks through their Service with the certificate it issued itself", func(ctx SpecContext) {
		// The leader sets every webhook's caBundle to the CA of the Secret it keeps.
		var secret corev1.Secret
		var bundle []byte
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: webhookSecret}, &secret)).To(Succeed())
			g.Expect(secret.Data["ca.crt"]).NotTo(BeEmpty())
			var vwc admissionregistrationv1.ValidatingWebhookConfiguration
			g.Expect(k8s.Get(ctx, client.ObjectKey{Name: "fusebox-validating-webhook-configuration"}, &vwc)).To(Succeed())
			var mwc admissionregistrationv1.MutatingWebhookConfiguration
			g.Expect(k8s.Get(ctx, client.ObjectKey{Name: "fusebox-mutating-webhook-configuration"}, &mwc)).To(Succeed())
			var configs []admissionregistrationv1.WebhookClientConfig
			for _, w := range vwc.Webhooks {
				configs = append(configs, w.ClientConfig)
			}
			for _, w := range mwc.Webhooks {
				configs = append(configs, w.ClientConfig)
			}
			g.Expect(configs).NotTo(BeEmpty())
			for _, c := range configs {
				g.Expect(c.Service).NotTo(BeNil())
				g.Expect(c.Service.Name).To(Equal(webhookService))
				g.Expect(string(c.CABundle)).To(Equal(string(secret.Data["ca.crt"])), "a caBundle differs from the Secret's ca.crt")
			}
			bundle = secret.Data["ca.crt"]
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())

		// Through the Service's cluster IP (kube-proxy's rules), under the name the API
		// server asks for, verified against that caBundle alone.
		var svc corev1.Service
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: webhookService}, &svc)).To(Succeed())
		pool := x509.NewCertPool()
		Expect(pool.AppendCertsFromPEM(bundle)).To(BeTrue())
		serverName := webhookService + "." + operatorNamespace + ".svc"
		addr := net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(int(svc.Spec.Ports[0].Port)))
		Eventually(func() error {
			d := &tls.Dialer{Config: &tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS12}}
			conn, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				return err
			}
			defer conn.Close()
			leaf := conn.(*tls.Conn).ConnectionState().PeerCertificates[0]
			GinkgoWriter.Printf("webhook %s serves %q, issued by %q, valid until %s\n", addr, leaf.DNSNames, leaf.Issuer.CommonName, leaf.NotAfter)
			return nil
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed(), "TLS to the webhook Service %s as %s", addr, serverName)
	}, SpecTimeout(3*time.Minute))

	It("refuses `kubectl apply` of a bad CircuitBreaker with the webhook's message", func(ctx SpecContext) {
		needKubectl()
		ensureNamespace(ctx, suiteNamespace)
		// The schema and its CEL rules refuse on their own what they can judge (a window
		// that is not whole milliseconds, say), so a refusal that only the webhook can give
		// needs a rule relative to now: an override whose until has already passed.
		bad := `apiVersion: resilience.fusebox.dev/v1alpha1
kind: CircuitBreaker
metadata:
  name: override-in-the-past
  namespace: ` + suiteNamespace + `
spec:
  override:
    mode: ForcedOpen
    until: "2020-01-01T00:00:00Z"
    reason: "INC-1: an override that ended before it began"
`
		out, err := kubectl(ctx, bad, "apply", "-f", "-")
		Expect(err).To(HaveOccurred(), "kubectl apply accepted the bad CircuitBreaker:\n%s", out)
		// The webhook answers with the API's own Invalid status, which kubectl prints as it
		// would a schema error; the rule and its words are the webhook's alone.
		Expect(out).To(ContainSubstring(`spec.override.until: Invalid value: "2020-01-01T00:00:00Z": must be in the future`))
		err = k8s.Get(ctx, client.ObjectKey{Namespace: suiteNamespace, Name: "override-in-the-past"}, &resiliencev1alpha1.CircuitBreaker{})
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the refused CircuitBreaker was stored: %v", err)

		// The same object with an until an hour ahead is accepted, and defaulted.
		until := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
		out, err = kubectl(ctx, strings.Replace(bad, "2020-01-01T00:00:00Z", until, 1), "apply", "-f", "-")
		Expect(err).NotTo(HaveOccurred(), out)
		// It holds no circuit that later specs use, but it is let go at once all the same.
		out, err = kubectl(ctx, "", "-n", suiteNamespace, "delete", "circuitbreaker", "override-in-the-past")
		Expect(err).NotTo(HaveOccurred(), out)
	}, SpecTimeout(2*time.Minute))

	It("serves metrics only to a token bound to the metrics-reader ClusterRole", func(ctx SpecContext) {
		ensureNamespace(ctx, suiteNamespace)
		reader := serviceAccount(ctx, suiteNamespace, "metrics-scraper")
		stranger := serviceAccount(ctx, suiteNamespace, "stranger")
		binding := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "fusebox-e2e-metrics-scraper"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: metricsReaderRole},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: suiteNamespace, Name: reader.Name}},
		}
		Expect(client.IgnoreAlreadyExists(k8s.Create(ctx, binding))).To(Succeed())
		readerToken, strangerToken := token(ctx, reader, nil), token(ctx, stranger, nil)

		var svc corev1.Service
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: metricsService}, &svc)).To(Succeed())
		url := "https://" + net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(int(svc.Spec.Ports[0].Port))) + "/metrics"
		Eventually(func(g Gomega) {
			code, body := scrape(ctx, url, readerToken)
			g.Expect(code).To(Equal(http.StatusOK), body)
			g.Expect(body).To(ContainSubstring("controller_runtime_reconcile_total"))
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed(), "the metrics-reader's token")
		code, body := scrape(ctx, url, strangerToken)
		Expect(code).To(Equal(http.StatusForbidden), "a token without the role: %s", body)
		code, body = scrape(ctx, url, "")
		Expect(code).To(Equal(http.StatusUnauthorized), "no token: %s", body)
	}, SpecTimeout(2*time.Minute))
}

// scrape GETs url with the bearer token (none when ""). The metrics endpoint's
// certificate is the manager's own and nobody's CA signs it, so it is not verified;
// what is under test is who gets an answer.
func scrape(ctx context.Context, url, bearer string) (int, string) {
	GinkgoHelper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	Expect(err).NotTo(HaveOccurred())
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp.StatusCode, string(b)
}

func ensureNamespace(ctx context.Context, name string) {
	GinkgoHelper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	Expect(client.IgnoreAlreadyExists(k8s.Create(ctx, ns))).To(Succeed())
}

func serviceAccount(ctx context.Context, namespace, name string) *corev1.ServiceAccount {
	GinkgoHelper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	Expect(client.IgnoreAlreadyExists(k8s.Create(ctx, sa))).To(Succeed())
	return sa
}

// token is a TokenRequest for the service account, bound to the pod when one is given
// (the API server then adds the pod's name and UID to the token's user).
func token(ctx context.Context, sa *corev1.ServiceAccount, pod *corev1.Pod) string {
	GinkgoHelper()
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}
	if pod != nil {
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	got, err := clientset.CoreV1().ServiceAccounts(sa.Namespace).CreateToken(ctx, sa.Name, req, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred(), "TokenRequest for %s/%s", sa.Namespace, sa.Name)
	return got.Status.Token
}
