package webhook_test

import (
	"context"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/webhook/podinject"
)

// The suite manager's view of the node agent: its Service in the operator's namespace,
// re-read after agentLookupTTL.
const (
	operatorNamespace = "fusebox-system"
	agentLookupTTL    = 200 * time.Millisecond
)

var agentService = types.NamespacedName{Namespace: operatorNamespace, Name: podinject.DefaultAgentService}

// ensureAgentService creates the agent's Service as config/nodeagent has it, unless it
// exists, and returns its cluster IP, which the API server allocates.
func ensureAgentService(ctx context.Context) string {
	GinkgoHelper()
	Expect(client.IgnoreAlreadyExists(k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}}))).To(Succeed())
	local := corev1.ServiceInternalTrafficPolicyLocal
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: agentService.Namespace, Name: agentService.Name},
		Spec: corev1.ServiceSpec{
			InternalTrafficPolicy: &local,
			Selector:              map[string]string{"app.kubernetes.io/name": "fusebox", "app.kubernetes.io/component": "node-agent"},
			Ports:                 []corev1.ServicePort{{Name: "agent", Port: breakerconfig.NodeAgentPort, TargetPort: intstr.FromString("agent")}},
		},
	}
	err := k8sClient.Create(ctx, svc)
	Expect(client.IgnoreAlreadyExists(err)).To(Succeed())
	if err == nil {
		// A spec before this one may have deleted the Service while the webhook held its
		// address: the webhook trusts what it read for agentLookupTTL (a time, not a
		// load-dependent wait), after which it reads this Service's new cluster IP.
		time.Sleep(2 * agentLookupTTL)
	}
	Expect(k8sClient.Get(ctx, agentService, svc)).To(Succeed())
	Expect(net.ParseIP(svc.Spec.ClusterIP)).NotTo(BeNil(), "the API server allocates the Service a cluster IP")
	return svc.Spec.ClusterIP
}

func agentURLOn(ip string) string {
	return "http://" + net.JoinHostPort(ip, strconv.Itoa(breakerconfig.NodeAgentPort))
}

// wiredToAgent says what c lacks to reach the agent at url, or "".
func wiredToAgent(c corev1.Container, url string) string {
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == podinject.AgentTokenVolumeName && m.MountPath == "/var/run/fusebox/node-agent" && m.ReadOnly
	}) {
		return "the token's read-only mount at /var/run/fusebox/node-agent"
	}
	want := map[string]string{
		breakerconfig.EnvNodeAgent: url, breakerconfig.EnvNodeAgentToken: "/var/run/fusebox/node-agent/token",
		"POD_NAME": "fieldRef:metadata.name", "POD_NAMESPACE": "fieldRef:metadata.namespace", "POD_UID": "fieldRef:metadata.uid",
	}
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			v = "fieldRef:" + e.ValueFrom.FieldRef.FieldPath
		}
		if e.Name == breakerconfig.EnvConfigDir {
			return "nothing of the ConfigMap's wiring (" + breakerconfig.EnvConfigDir + " is set)"
		}
		if want[e.Name] == v {
			delete(want, e.Name)
		}
	}
	for name, v := range want {
		return name + "=" + v
	}
	return ""
}

// tokenVolume checks the pod's projected token for the agent, as the API server stored
// it, and that the pod mounts no ConfigMap.
func tokenVolume(g Gomega, p *corev1.Pod) {
	i := slices.IndexFunc(p.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == podinject.AgentTokenVolumeName })
	g.Expect(i).NotTo(Equal(-1), "volumes %+v", p.Spec.Volumes)
	pr := p.Spec.Volumes[i].Projected
	g.Expect(pr).NotTo(BeNil())
	g.Expect(pr.Sources).To(HaveLen(1))
	g.Expect(pr.Sources[0].ServiceAccountToken).To(HaveValue(And(
		HaveField("Audience", breakerconfig.NodeAgentAudience),
		HaveField("ExpirationSeconds", HaveValue(BeEquivalentTo(600))),
		HaveField("Path", "token"))))
	g.Expect(p.Spec.Volumes).NotTo(ContainElement(HaveField("ConfigMap", Not(BeNil()))), "a pod wired to the agent mounts no ConfigMap")
}

var nodeAgentOptIn = map[string]string{resiliencev1alpha1.AnnotationNodeAgent: "true"}

var _ = Describe("Node agent wiring", func() {
	ctx := context.Background()
	var url string
	BeforeEach(func() { url = agentURLOn(ensureAgentService(ctx)) })

	It("wires a pod annotated fusebox.dev/node-agent to its node's agent at the Service's cluster IP, and re-admission changes nothing", func() {
		ns := newNamespace()
		cl, w := warningClient()
		always := corev1.ContainerRestartPolicyAlways
		p := pod(ns, nodeAgentOptIn, corev1.Container{Name: "app", Image: "app"}, corev1.Container{Name: "worker", Image: "worker"})
		p.Spec.InitContainers = []corev1.Container{{Name: "migrate", Image: "migrate"}, {Name: "proxy", Image: "proxy", RestartPolicy: &always}}
		Expect(cl.Create(ctx, p)).To(Succeed())
		Expect(w.Take()).To(BeEmpty())
		tokenVolume(Default, p)
		for _, c := range []corev1.Container{p.Spec.Containers[0], p.Spec.Containers[1], p.Spec.InitContainers[1]} {
			Expect(wiredToAgent(c, url)).To(BeEmpty(), "container %s: %+v", c.Name, c)
		}
		Expect(p.Spec.InitContainers[0].Env).To(BeEmpty(), "a plain init container is left alone")
		Expect(p.Spec.InitContainers[0].VolumeMounts).To(BeEmpty())

		again, warns := readmit(cl, w, p)
		Expect(warns).To(BeEmpty())
		Expect(sameSpec(again, p)).To(BeTrue(), "re-admission changed the pod:\n%+v\n%+v", p.Spec, again.Spec)
	})

	It("wires every pod of a namespace labelled fusebox.dev/node-agent=enabled, but one annotated false", func() {
		ns := labelledNamespace("agent-ns-", map[string]string{resiliencev1alpha1.LabelNodeAgent: resiliencev1alpha1.NodeAgentEnabled})
		plain := pod(ns, nil)
		Expect(k8sClient.Create(ctx, plain)).To(Succeed())
		tokenVolume(Default, plain)
		Expect(wiredToAgent(plain.Spec.Containers[0], url)).To(BeEmpty(), "a pod with no annotation at all: %+v", plain.Spec.Containers[0])

		out := pod(ns, map[string]string{resiliencev1alpha1.AnnotationNodeAgent: "false"})
		Expect(k8sClient.Create(ctx, out)).To(Succeed())
		Expect(out.Spec.Volumes).To(BeEmpty(), "annotated false")
		Expect(out.Spec.Containers[0].Env).To(BeEmpty())

		// The annotations still work there: the sidecar, wired to the agent.
		sc := pod(ns, map[string]string{resiliencev1alpha1.AnnotationSidecar: "true"})
		Expect(k8sClient.Create(ctx, sc)).To(Succeed())
		Expect(sc.Spec.InitContainers).To(HaveLen(1))
		Expect(wiredToAgent(sc.Spec.InitContainers[0], url)).To(BeEmpty(), "the sidecar: %+v", sc.Spec.InitContainers[0])
		Expect(wiredToAgent(sc.Spec.Containers[0], url)).NotTo(BeEmpty(), "without fusebox.dev/inject the application gets only the socket")

		// Any other value of the label means nothing.
		other := labelledNamespace("agent-ns-true-", map[string]string{resiliencev1alpha1.LabelNodeAgent: "true"})
		p := pod(other, nil)
		Expect(k8sClient.Create(ctx, p)).To(Succeed())
		Expect(p.Spec.Volumes).To(BeEmpty(), "label value \"true\", not \"enabled\"")
	})

	It("leaves a pod with no service account unwired, with a warning, where the API server would refuse its token", func() {
		ns := newNamespace()
		cl, w := warningClient()
		// The control: a projected token in a pod with no service account is refused
		// (envtest runs without the ServiceAccount admission that names one).
		bare := pod(ns, nil)
		bare.Spec.ServiceAccountName = ""
		bare.Spec.Volumes = []corev1.Volume{{Name: "token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: breakerconfig.NodeAgentAudience, Path: "token"}}},
		}}}}
		Expect(k8sClient.Create(ctx, bare)).To(MatchError(ContainSubstring("must not be specified when serviceAccountName is not set")))

		p := pod(ns, nodeAgentOptIn)
		p.Spec.ServiceAccountName = ""
		Expect(cl.Create(ctx, p)).To(Succeed())
		Expect(w.Take()).To(Equal([]string{"fusebox: the pod has no serviceAccountName, which its token for the node agent needs, so it is not wired to the agent"}))
		Expect(p.Spec.Volumes).To(BeEmpty())
		Expect(p.Spec.Containers[0].Env).To(BeEmpty())
	})

	// Every pod reaches one pod webhook at most: the generated namespace selectors
	// exclude each other, so no pod is wired twice or by the wrong handler.
	It("sends a pod to one pod webhook: the annotations' or the labelled namespace's", func() {
		selectors := map[string]labels.Selector{}
		for _, cfg := range testEnv.WebhookInstallOptions.MutatingWebhooks {
			for _, wh := range cfg.Webhooks {
				if wh.Rules[0].Resources[0] != "pods" {
					continue
				}
				Expect(*wh.FailurePolicy).To(Equal(admissionregistrationv1.Ignore), wh.Name)
				sel, err := metav1.LabelSelectorAsSelector(wh.NamespaceSelector)
				Expect(err).NotTo(HaveOccurred())
				selectors[wh.Name] = sel
			}
		}
		Expect(selectors).To(HaveKey("inject.pods.fusebox.dev"))
		Expect(selectors).To(HaveKey("node-agent.pods.fusebox.dev"))
		for _, nsLabels := range []labels.Set{
			{"kubernetes.io/metadata.name": "shop"},
			{"kubernetes.io/metadata.name": "shop", resiliencev1alpha1.LabelNodeAgent: resiliencev1alpha1.NodeAgentEnabled},
			{"kubernetes.io/metadata.name": "shop", resiliencev1alpha1.LabelNodeAgent: "disabled"},
		} {
			matched := 0
			for _, sel := range selectors {
				if sel.Matches(nsLabels) {
					matched++
				}
			}
			Expect(matched).To(Equal(1), "namespace labelled %v", nsLabels)
		}
		for _, nsLabels := range []labels.Set{
			{"kubernetes.io/metadata.name": "kube-system", resiliencev1alpha1.LabelNodeAgent: resiliencev1alpha1.NodeAgentEnabled},
			{"kubernetes.io/metadata.name": operatorNamespace, resiliencev1alpha1.LabelNodeAgent: resiliencev1alpha1.NodeAgentEnabled},
			{"kubernetes.io/metadata.name": "shop", resiliencev1alpha1.LabelNodeAgent: resiliencev1alpha1.NodeAgentEnabled, resiliencev1alpha1.LabelInjection: resiliencev1alpha1.InjectionDisabled},
		} {
			for name, sel := range selectors {
				Expect(sel.Matches(nsLabels)).To(BeFalse(), "%s runs in a namespace labelled %v", name, nsLabels)
			}
		}
	})
})

var _ = Describe("The node agent's address", Serial, func() {
	ctx := context.Background()

	It("is the Service's cluster IP, read at admission, and its DNS name with a warning while the Service cannot be read", func() {
		ns := newNamespace()
		cl, w := warningClient()
		ip := ensureAgentService(ctx)
		DeferCleanup(func() { ensureAgentService(ctx) })

		// The webhook re-reads the Service after the suite's TTL (200 ms): each
		// Eventually waits for that, bounded generously for a busy machine.
		admitted := func(g Gomega) (string, []string) {
			p := pod(ns, nodeAgentOptIn)
			g.Expect(cl.Create(ctx, p, client.DryRunAll)).To(Succeed())
			warns := w.Take()
			for _, e := range p.Spec.Containers[0].Env {
				if e.Name == breakerconfig.EnvNodeAgent {
					return e.Value, warns
				}
			}
			return "", warns
		}
		Eventually(func(g Gomega) {
			url, warns := admitted(g)
			g.Expect(url).To(Equal(agentURLOn(ip)))
			g.Expect(warns).To(BeEmpty())
		}).WithTimeout(30 * time.Second).Should(Succeed())

		Expect(k8sClient.Delete(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: agentService.Namespace, Name: agentService.Name}})).To(Succeed())
		dns := "http://fusebox-node.fusebox-system.svc:8476"
		Eventually(func(g Gomega) {
			url, warns := admitted(g)
			g.Expect(url).To(Equal(dns))
			g.Expect(warns).To(ConsistOf(
				`fusebox: there is no Service fusebox-system/fusebox-node (is the node agent installed? the chart's nodeAgent.enabled), so FUSEBOX_NODE_AGENT names the node agent by its DNS name, ` + dns + `, which only a cluster with DNS for Services resolves`))
		}).WithTimeout(30*time.Second).Should(Succeed(), "with the Service gone, the DNS name and a warning")

		// Re-created: a new cluster IP, which new pods get.
		again := ensureAgentService(ctx)
		Eventually(func(g Gomega) {
			url, warns := admitted(g)
			g.Expect(url).To(Equal(agentURLOn(again)))
			g.Expect(warns).To(BeEmpty())
		}).WithTimeout(30 * time.Second).Should(Succeed())
	})

	// The locator against the real API server, on a clock of the test's: what it read
	// holds for its TTL, whatever the Service does in between.
	It("trusts what it read for its TTL, under concurrent admissions", func() {
		ip := ensureAgentService(ctx)
		DeferCleanup(func() { ensureAgentService(ctx) })
		var (
			mu  sync.Mutex
			now = time.Unix(1_000_000, 0)
		)
		clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
		advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) }
		l := &podinject.AgentLocator{Reader: k8sClient, Service: agentService, TTL: 10 * time.Second, Now: clock}

		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				defer GinkgoRecover()
				url, warning := l.URL(ctx)
				Expect(url).To(Equal(agentURLOn(ip)))
				Expect(warning).To(BeEmpty())
			})
		}
		wg.Wait()

		Expect(k8sClient.Delete(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: agentService.Namespace, Name: agentService.Name}})).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(ctx, agentService, &corev1.Service{}))
		}).Should(BeTrue())
		advance(9 * time.Second)
		url, warning := l.URL(ctx)
		Expect(url).To(Equal(agentURLOn(ip)), "within the TTL, what was read")
		Expect(warning).To(BeEmpty())

		advance(2 * time.Second)
		url, warning = l.URL(ctx)
		Expect(url).To(Equal(l.DNSURL()), "past the TTL, read again: the Service is gone")
		Expect(warning).To(ContainSubstring("there is no Service fusebox-system/fusebox-node"))

		// A failure is remembered for the TTL too, then read again.
		again := ensureAgentService(ctx)
		url, _ = l.URL(ctx)
		Expect(url).To(Equal(l.DNSURL()))
		advance(11 * time.Second)
		url, warning = l.URL(ctx)
		Expect(url).To(Equal(agentURLOn(again)))
		Expect(warning).To(BeEmpty())
	})
})
