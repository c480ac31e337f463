package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// The node agent on two nodes (issue 30 item 2): the chart upgraded with
// nodeAgent.enabled, and the example's pods on both nodes opted into it. Each spec leaves
// the pods running, closed, for the next; the namespace stays for the spec of a node
// deleted from the API, which runs after the uninstall (cluster_test.go).
func nodeAgentSpecs() {
	var (
		nodes   []corev1.Node
		perNode [][]corev1.Pod // perNode[i] run on nodes[i]
		agents  map[string]corev1.Pod
	)
	all := func() []corev1.Pod { return append(append([]corev1.Pod{}, perNode[0]...), perNode[1]...) }

	BeforeAll(func(ctx SpecContext) {
		needKubectl()
		nodes = needNodes(ctx, 2)
		start := time.Now()
		helmUpgrade(map[string]any{"nodeAgent": map[string]any{"enabled": true}})
		agents = waitAgents(ctx, nodes)
		record("helm upgrade nodeAgent.enabled → an agent Ready on each of 2 nodes", time.Since(start), "DaemonSet fusebox-node, fuseboxd image already on the nodes")
		waitManagers(ctx, 2, *image, 3*time.Minute)
		waitWebhooks(ctx)

		for _, u := range decodeManifests([]byte(agentManifests(agentNamespace, nil)), "the node agent's manifests") {
			apply(ctx, u)
		}
		// Published before the pods start, so their first config is the breaker's.
		Eventually(func(g Gomega) {
			g.Expect(breakerIn(ctx, g, agentNamespace).Status.ConfigMapName).NotTo(BeEmpty())
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed(), "the CircuitBreaker was not published")
		start = time.Now()
		for i := range nodes {
			apply(ctx, toUnstructured(agentAppDeployment(agentNamespace, i+1, nodes[i].Name, 2), "Deployment"))
		}
		perNode = make([][]corev1.Pod, len(nodes))
		Eventually(func(g Gomega) {
			for i := range nodes {
				ps := pods(ctx, agentNamespace, client.MatchingLabels{"app.kubernetes.io/name": agentApp, "e2e.fusebox.dev/node": fmt.Sprint(i + 1)})
				g.Expect(ps).To(HaveLen(2))
				for _, p := range ps {
					g.Expect(p.Spec.NodeName).To(Equal(nodes[i].Name), "pod %s", p.Name)
					g.Expect(running(&p)).To(BeTrue(), "pod %s: %s %+v", p.Name, p.Status.Phase, p.Status.ContainerStatuses)
				}
				perNode[i] = ps
			}
		}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())
		record("apply → 2 example pods Running on each of 2 nodes, wired to the agent", time.Since(start), "")
	}, NodeTimeout(10*time.Minute))

	It("carries each node's pods' reports through that node's agent, and the CircuitBreaker counts the pods of both", func(ctx SpecContext) {
		var svc corev1.Service
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: agentService}, &svc)).To(Succeed())
		for _, p := range all() {
			Expect(envOf(&p, agentEnv)).To(ContainSubstring(svc.Spec.ClusterIP), "pod %s is not wired to the agent's Service", p.Name)
			Expect(envOf(&p, "FUSEBOX_CONFIG_DIR")).To(BeEmpty(), "pod %s got the config volume too", p.Name)
		}
		gen := exampleGeneration(ctx, agentNamespace)
		expectNodeReports(ctx, agentNamespace, nodes, perNode, gen, resiliencev1alpha1.StateClosed)
		// Through the agent alone: no pod of this namespace may write a report of its own
		// (no RBAC), and none did.
		var own resiliencev1alpha1.BreakerReportList
		Expect(k8s.List(ctx, &own, client.InNamespace(agentNamespace))).To(Succeed())
		Expect(own.Items).To(BeEmpty(), "a pod wired to its agent wrote a BreakerReport")
		Eventually(func(g Gomega) {
			cb := breakerIn(ctx, g, agentNamespace)
			g.Expect(cb.Status.MemberCounts).NotTo(BeNil())
			g.Expect(cb.Status.MemberCounts.Reporting).To(BeEquivalentTo(4), "the pods of both nodes")
			g.Expect(cb.Status.MemberCounts.OnLatestConfig).To(BeEquivalentTo(4))
			// A node report names only its notable pods, and a closed pod on the latest
			// config never is (docs/design.md §9): a quiet fleet lists no member.
			g.Expect(listedMembers(cb)).To(BeEmpty())
			g.Expect(cb.Status.State).To(Equal(resiliencev1alpha1.StateClosed))
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())

		// A trip on both nodes reaches the breaker through both agents.
		start := time.Now()
		setUpstream(ctx, all(), "down")
		waitBreaker(ctx, agentNamespace, true)
		record("upstream down on 2 nodes → Open=True through the node agents", time.Since(start), "4 pods, 2 per node, window 2s")
		expectSeenOpen(ctx, agentNamespace, nodes, perNode)
		Eventually(func(g Gomega) {
			counts := breakerIn(ctx, g, agentNamespace).Status.MemberCounts
			g.Expect(counts.Reporting).To(BeEquivalentTo(4))
			g.Expect(counts.Closed).To(BeZero(), "every pod open or probing, on both nodes")
			// Open pods are notable: the members name them, from both nodes' reports.
			g.Expect(listedMembers(breakerIn(ctx, g, agentNamespace))).To(ConsistOf(names(all())))
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
		start = time.Now()
		setUpstream(ctx, all(), "up")
		waitBreaker(ctx, agentNamespace, false)
		record("upstream up on 2 nodes → Open=False through the node agents", time.Since(start), "")
		expectNodeReports(ctx, agentNamespace, nodes, perNode, gen, resiliencev1alpha1.StateClosed)
	}, SpecTimeout(6*time.Minute))

	It("kubectl fusebox pods lists the pods of both nodes through pods/proxy", func(ctx SpecContext) {
		expectPluginPods(ctx, nodes, perNode)
	}, SpecTimeout(3*time.Minute))

	It("refuses node 2's NodeBreakerReport to a token bound to node 1's agent pod", func(ctx SpecContext) {
		own, other := nodes[0].Name, nodes[1].Name
		agent := agents[own]
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: agentServiceAccount}}
		asAgent := asToken(token(ctx, sa, &agent))
		// Written as the agent writes: an update of the object as read.
		touched := func(ctx context.Context, node string) *resiliencev1alpha1.NodeBreakerReport {
			rep, err := nodeReport(ctx, agentNamespace, node)
			Expect(err).NotTo(HaveOccurred())
			rep.Labels = map[string]string{"e2e.fusebox.dev/touched-by": agent.Name}
			return rep
		}

		// Its own node's report it may write (a dry run: the agent owns what it holds).
		Expect(asAgent.Update(ctx, touched(ctx, own), client.DryRunAll)).To(Succeed(), "node %s's agent token could not write its own node's report", own)

		theirs := touched(ctx, other)
		err := asAgent.Update(ctx, theirs)
		Expect(err).To(HaveOccurred(), "node %s's agent token wrote node %s's report", own, other)
		Expect(isForbidden(err)).To(BeTrue(), "refused, but not as forbidden: %v", err)
		Expect(err.Error()).To(ContainSubstring("the agent of node " + own + " may write only the NodeBreakerReport of that node"))
		err = asAgent.Delete(ctx, theirs, client.DryRunAll)
		Expect(isForbidden(err)).To(BeTrue(), "node %s's agent token may delete node %s's report: %v", own, other, err)

		// Nor make one for node 2 where node 2 has none, owned by node 2.
		forged := &resiliencev1alpha1.NodeBreakerReport{
			ObjectMeta: metav1.ObjectMeta{Namespace: exampleNamespace, Name: other, OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: other, UID: nodes[1].UID,
			}}},
			NodeName: other,
		}
		err = asAgent.Create(ctx, forged, client.DryRunAll)
		Expect(isForbidden(err)).To(BeTrue(), "node %s's agent token may create a report for node %s: %v", own, other, err)
	}, SpecTimeout(time.Minute))

	It("counts for nothing, with an Event, a line node 1's agent token writes for a pod of node 2", func(ctx SpecContext) {
		own := nodes[0].Name
		stranger := perNode[1][0]
		agent := agents[own]
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: agentServiceAccount}}
		asAgent := asToken(token(ctx, sa, &agent))

		// A pod of node 2, claimed Open by node 1's report: one pod more than node 1 runs,
		// the stranger among its notable pods.
		forge := func(e *resiliencev1alpha1.NodeBreakerEntry) {
			now := metav1.NewTime(time.Now().Truncate(time.Second))
			e.Pods, e.Open, e.EarnedOpen = e.Pods+1, e.Open+1, e.EarnedOpen+1
			e.OpenSince = &metav1.MicroTime{Time: now.Time}
			e.Notable = append([]resiliencev1alpha1.NotablePod{{Name: stranger.Name, UID: stranger.UID, Reason: "Tripped",
				PodCircuit: resiliencev1alpha1.PodCircuit{State: resiliencev1alpha1.StateOpen, Since: now}}}, e.Notable...)
			if len(e.Notable) > resiliencev1alpha1.MaxNotablePods {
				e.Notable = e.Notable[:resiliencev1alpha1.MaxNotablePods]
			}
		}
		// Written as the agent writes, an update of the object as read, again on a conflict
		// with the agent's own writes; taken back by the agent's next write, or by hand.
		var honest []resiliencev1alpha1.NodeBreakerEntry
		writeForged := func(ctx context.Context, forged bool) error {
			return retry.RetryOnConflict(retry.DefaultRetry, func() error {
				rep, err := nodeReport(ctx, agentNamespace, own)
				if err != nil {
					return err
				}
				if forged {
					honest = slices.Clone(rep.Breakers)
					for i := range rep.Breakers {
						if rep.Breakers[i].Name == exampleBreaker {
							forge(&rep.Breakers[i])
							break
						}
					}
				} else {
					rep.Breakers = honest
				}
				return asAgent.Update(ctx, rep)
			})
		}
		// The honest state first: the breaker's status follows the node reports' last
		// recovery by a moment (HalfOpen until the last pod's probes are counted).
		settled := func(g Gomega) {
			cb := breakerIn(ctx, g, agentNamespace)
			g.Expect(cb.Status.State).To(Equal(resiliencev1alpha1.StateClosed))
			g.Expect(cb.Status.MemberCounts.Reporting).To(BeEquivalentTo(4))
		}
		Eventually(settled).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
		since := time.Now().Add(-time.Second)
		Expect(writeForged(ctx, true)).To(Succeed(), "node 1's agent token may write node 1's report, whatever it claims (the operator judges it)")
		DeferCleanup(func(ctx SpecContext) {
			Expect(writeForged(ctx, false)).To(Succeed(), "take the forged claim back")
		})

		var note string
		Eventually(func(g Gomega) {
			var list eventsv1.EventList
			g.Expect(k8s.List(ctx, &list, client.InNamespace(agentNamespace))).To(Succeed())
			for _, e := range list.Items {
				if e.Regarding.Kind == "NodeBreakerReport" && e.Regarding.Name == own && e.Reason == resiliencev1alpha1.EventPodNotOnNode &&
					e.Type == corev1.EventTypeWarning && !e.EventTime.Time.Before(since) {
					note = e.Note
				}
			}
			g.Expect(note).To(ContainSubstring(stranger.Name), "no PodNotOnNode Event on node %s's report naming %s", own, stranger.Name)
			g.Expect(note).To(ContainSubstring("counted"), "the Event says what counts")
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
		GinkgoWriter.Printf("event: %s\n", note)

		// Counted, the forged Open would be the breaker's state (the most severe pod's), and a
		// fifth pod would report.
		Consistently(func(g Gomega) {
			cb := breakerIn(ctx, g, agentNamespace)
			g.Expect(cb.Status.State).To(Equal(resiliencev1alpha1.StateClosed), "the forged line counted")
			g.Expect(cb.Status.MemberCounts.Reporting).To(BeEquivalentTo(4))
			g.Expect(cb.Status.MemberCounts.Open).To(BeZero())
		}).WithContext(ctx).WithTimeout(10 * time.Second).WithPolling(time.Second).Should(Succeed())
	}, SpecTimeout(2*time.Minute))

	It("refuses with 403 a pod's node-agent token presented to the other node's agent", func(ctx SpecContext) {
		pod := perNode[0][0]
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: agentNamespace, Name: pod.Spec.ServiceAccountName}}
		// What the kubelet projects at /var/run/fusebox/node-agent: a token of the pod's
		// service account, bound to the pod, for the agent's audience.
		got, err := clientset.CoreV1().ServiceAccounts(sa.Namespace).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
			Audiences:         []string{agentAudience},
			ExpirationSeconds: ptr.To[int64](600),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		}}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		bearer := got.Status.Token
		own, other := agents[nodes[0].Name], agents[nodes[1].Name]

		// Its own node's agent answers it.
		var code int
		var body string
		Eventually(func() (err error) {
			code, body, err = askAgent(ctx, &own, http.MethodGet, "/v1/config", bearer, "")
			return err
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
		Expect(code).To(Equal(http.StatusOK), "pod %s's token at its own node's agent: %s", pod.Name, body)

		for _, ask := range []struct{ method, path, body string }{
			{http.MethodGet, "/v1/config", ""},
			{http.MethodPut, "/v1/report", `{"breakers":[]}`},
		} {
			code, body, err := askAgent(ctx, &other, ask.method, ask.path, bearer, ask.body)
			Expect(err).NotTo(HaveOccurred())
			Expect(code).To(Equal(http.StatusForbidden), "%s %s on node %s's agent with a token of a pod of node %s: %s", ask.method, ask.path, nodes[1].Name, nodes[0].Name, body)
			var refusal struct {
				Error string `json:"error"`
			}
			Expect(json.Unmarshal([]byte(body), &refusal)).To(Succeed(), "the refusal: %s", body)
			Expect(refusal.Error).NotTo(BeEmpty())
		}
		// The refused report changed nothing: node 1's report still counts its pods.
		rep, err := nodeReport(ctx, agentNamespace, nodes[0].Name)
		Expect(err).NotTo(HaveOccurred())
		Expect(tallyOf(rep, exampleBreaker).pods).To(BeEquivalentTo(len(perNode[0])), "node 1's report lost pod %s", pod.Name)
	}, SpecTimeout(time.Minute))

	It("keeps node 2's pods deciding while its agent pod is replaced, and the new agent converges without unchanged writes", func(ctx SpecContext) {
		node := nodes[1].Name
		ps := perNode[1]
		// Quiet first: the report no longer changes (the pods closed, no traffic reported
		// for this breaker), so any write from here on is one the restart made.
		var before string
		Eventually(func(g Gomega) {
			rep, err := nodeReport(ctx, agentNamespace, node)
			g.Expect(err).NotTo(HaveOccurred())
			was := before
			before = rep.ResourceVersion
			g.Expect(before).To(Equal(was), "node %s's report still changes", node)
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(3 * time.Second).Should(Succeed())

		old := agents[node]
		start := time.Now()
		Expect(k8s.Delete(ctx, &old)).To(Succeed())
		// The pods keep calling and deciding, with their agent gone and back.
		expectCalling(ctx, ps, start, "circuit closed, upstream up")
		var replacement corev1.Pod
		Eventually(func(g Gomega) {
			replacement = agentPods(ctx, g)[node]
			g.Expect(replacement.UID).NotTo(BeEmpty(), "no Ready agent on node %s", node)
			g.Expect(replacement.UID).NotTo(Equal(old.UID), "still the old agent")
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())
		record("node agent pod deleted → its replacement Ready", time.Since(start), "DaemonSet, readiness every 5 s")
		agents[node] = replacement
		expectCalling(ctx, ps, time.Now(), "circuit closed, upstream up")
		expectUntouched(ctx, ps)

		// The replacement read back what its predecessor wrote, and the pods' resends to
		// it, once each pod has seen the new agent, said the same: nothing is written.
		unchanged := func(g Gomega) {
			rep, err := nodeReport(ctx, agentNamespace, node)
			g.Expect(err).NotTo(HaveOccurred())
			if rep.ResourceVersion != before {
				StopTrying(fmt.Sprintf("node %s's report was written again with nothing new (resourceVersion %s, then %s): %+v", node, before, rep.ResourceVersion, rep.ManagedFields)).Now()
			}
		}
		Eventually(func(g Gomega) {
			unchanged(g)
			for _, p := range ps {
				log, err := podLog(ctx, &p, start)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(log).To(ContainSubstring("The node agent restarted"), "pod %s has not resent its report to the new agent", p.Name)
			}
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
		// The agent holds an echo up to 1 s before it writes it (design.md §9).
		Consistently(unchanged).WithContext(ctx).WithTimeout(5 * time.Second).WithPolling(500 * time.Millisecond).Should(Succeed())

		// And what is new, the replacement carries: node 2's pods trip, their report
		// and the breaker say so, and heal.
		start = time.Now()
		setUpstream(ctx, ps, "down")
		expectCalling(ctx, ps, start, "circuit open, upstream down")
		waitBreaker(ctx, agentNamespace, true)
		expectSeenOpen(ctx, agentNamespace, nodes[1:], perNode[1:])
		gen := exampleGeneration(ctx, agentNamespace)
		setUpstream(ctx, ps, "up")
		waitBreaker(ctx, agentNamespace, false)
		expectNodeReports(ctx, agentNamespace, nodes, perNode, gen, resiliencev1alpha1.StateClosed)
	}, SpecTimeout(6*time.Minute))

	It("admits and runs, under Pod Security restricted, a pod opted into the node agent and a pod annotated for the sidecar", func(ctx SpecContext) {
		worker := need("WORKER_IMAGE (-worker-image)", *workerImage)
		manifests := agentManifests(restrictedNamespace, map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}) + sidecarBreakerManifests(restrictedNamespace)
		for _, u := range decodeManifests([]byte(manifests), "the restricted namespace's manifests") {
			apply(ctx, u)
		}
		Eventually(func(g Gomega) {
			g.Expect(breakerIn(ctx, g, restrictedNamespace).Status.ConfigMapName).NotTo(BeEmpty())
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed(), "the CircuitBreaker was not published")

		// The namespace does enforce: the worker as a careless team writes it is refused.
		careless := workerPod(worker)
		careless.Namespace, careless.Name, careless.Annotations = restrictedNamespace, "careless", nil
		err := k8s.Create(ctx, careless, client.DryRunAll)
		Expect(err).To(HaveOccurred(), "a pod allowing privilege escalation was admitted: the namespace does not enforce restricted")
		Expect(err.Error()).To(ContainSubstring("violates PodSecurity"))

		d := agentAppDeployment(restrictedNamespace, 2, nodes[1].Name, 1)
		tmpl := d.Spec.Template
		wired := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: restrictedNamespace, Name: "wired", Labels: tmpl.Labels, Annotations: tmpl.Annotations}, Spec: *tmpl.Spec.DeepCopy()}
		Expect(k8s.Create(ctx, wired)).To(Succeed(), "the pod opted into the node agent was not admitted")
		side := restrictedWorker(worker)
		Expect(k8s.Create(ctx, side)).To(Succeed(), "the pod annotated for the sidecar was not admitted")
		Expect(side.Spec.InitContainers).NotTo(BeEmpty(), "no sidecar was injected")

		for _, p := range []*corev1.Pod{wired, side} {
			Eventually(func(g Gomega) {
				g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
				g.Expect(running(p)).To(BeTrue(), "pod %s: %s %+v %+v", p.Name, p.Status.Phase, p.Status.InitContainerStatuses, p.Status.ContainerStatuses)
			}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())
		}
		// Each works: the wired pod counted by its node's report, the sidecar's pod's own
		// report, Open from the worker's failures.
		Eventually(func(g Gomega) {
			rep, err := nodeReport(ctx, restrictedNamespace, wired.Spec.NodeName)
			g.Expect(err).NotTo(HaveOccurred())
			t := tallyOf(rep, exampleBreaker)
			g.Expect(t.pods).To(BeEquivalentTo(1), "node %s's report does not count %s", wired.Spec.NodeName, wired.Name)
			g.Expect(t.closed).To(BeEquivalentTo(1), "%s is not counted closed: %+v", wired.Name, t)
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
		Eventually(func(g Gomega) {
			var rep resiliencev1alpha1.BreakerReport
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(side), &rep)).To(Succeed(), "the report of pod %s", side.Name)
			g.Expect(entryNamed(rep.Breakers, sidecarBreaker)).To(HaveField("State", resiliencev1alpha1.StateOpen))
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	}, SpecTimeout(5*time.Minute))
}

// A namespace that enforces Pod Security restricted, for the spec of the pods the
// webhooks change there.
const restrictedNamespace = "fusebox-restricted"

// sidecarBreakerManifests are the sidecar's worker's identity, its role and its breaker in
// namespace, as sidecarManifests has them in its own.
func sidecarBreakerManifests(namespace string) string {
	docs := strings.Split(sidecarManifests, "\n---\n")
	return "\n---\n" + strings.ReplaceAll(strings.Join(docs[1:], "\n---\n"), "namespace: "+sidecarNamespace, "namespace: "+namespace)
}

// restrictedWorker is workerPod in the restricted namespace, its container as restricted
// as Pod Security asks.
func restrictedWorker(image string) *corev1.Pod {
	p := workerPod(image)
	p.Namespace = restrictedNamespace
	p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	return p
}

// exampleGeneration is the example's breaker's generation in namespace.
func exampleGeneration(ctx SpecContext, namespace string) int64 {
	GinkgoHelper()
	var cb resiliencev1alpha1.CircuitBreaker
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: exampleBreaker}, &cb)).To(Succeed())
	return cb.Generation
}

func listedMembers(cb *resiliencev1alpha1.CircuitBreaker) []string {
	var out []string
	for _, m := range cb.Status.Members {
		out = append(out, m.Pod)
	}
	return out
}

// nodeGoneSpecs run after the uninstall and before make deploy's specs: a node deleted
// from the API takes its pods with it, which no spec after needs, and make undeploy
// deletes the CRDs, so the reports this judges must go before.
func nodeGoneSpecs() {
	It("garbage-collects the node reports of a node deleted from the API", func(ctx SpecContext) {
		nodes := needNodes(ctx, 2)
		gone, kept := nodes[1], nodes[0]
		for _, n := range nodes {
			rep, err := nodeReport(ctx, agentNamespace, n.Name)
			Expect(err).NotTo(HaveOccurred(), "node %s's report in %s (the node agent's specs write it)", n.Name, agentNamespace)
			Expect(rep.OwnerReferences).To(ContainElement(HaveField("UID", n.UID)))
		}
		// With the operator uninstalled, nobody but the garbage collector deletes them.
		var managers corev1.PodList
		Expect(k8s.List(ctx, &managers, client.InNamespace(operatorNamespace), managerLabels)).To(Succeed())
		Expect(managers.Items).To(BeEmpty(), "a manager runs")

		start := time.Now()
		Expect(k8s.Delete(ctx, &gone)).To(Succeed())
		Eventually(func() error {
			_, err := nodeReport(ctx, agentNamespace, gone.Name)
			if isNotFound(err) {
				return nil
			}
			return fmt.Errorf("still there (%v)", err)
		}).WithContext(ctx).WithTimeout(2*time.Minute).WithPolling(250*time.Millisecond).Should(Succeed(), "node %s's report outlived its Node", gone.Name)
		record("Node deleted → its node report deleted by the GC", time.Since(start), "no operator, no agent running")
		_, err := nodeReport(ctx, agentNamespace, kept.Name)
		Expect(err).NotTo(HaveOccurred(), "node %s's report went too", kept.Name)
		var n corev1.Node
		err = k8s.Get(ctx, client.ObjectKeyFromObject(&gone), &n)
		if err == nil {
			Expect(n.UID).NotTo(Equal(gone.UID), "the Node was not deleted")
		}
	}, SpecTimeout(3*time.Minute))
}
