package controller

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// Helpers of the specs of node reports (docs/design.md §9): Nodes, the node agents' pods
// and identities, and pods bound to nodes. envtest runs no kubelet and no scheduler: a
// pod is bound by naming its node, and its readiness is what a spec writes in its status.

// nodeAgentAccount is the node agent's service account, as config/policy names it.
const nodeAgentAccount = "system:serviceaccount:" + DefaultOperatorNamespace + ":fusebox-node"

// ensureNode returns the Node of that name, created first if it does not exist.
func ensureNode(ctx context.Context, name string) *corev1.Node {
	node := &corev1.Node{}
	err := k8sClient.Get(ctx, types.NamespacedName{Name: name}, node)
	if err == nil {
		return node
	}
	Expect(apierrors.IsNotFound(err)).To(BeTrue(), "get node %s: %v", name, err)
	node = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	Expect(k8sClient.Create(ctx, node)).To(Succeed())
	return node
}

// ensureNamespace makes the namespace of that name exist.
func ensureNamespace(ctx context.Context, name string) {
	err := k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if !apierrors.IsAlreadyExists(err) {
		Expect(err).NotTo(HaveOccurred())
	}
}

// agentOf returns node's agent pod in the operator's namespace, created first (bound to
// the node, labelled as the DaemonSet labels it) if missing.
func agentOf(ctx context.Context, node string) *corev1.Pod {
	ensureNamespace(ctx, DefaultOperatorNamespace)
	pod := &corev1.Pod{}
	key := types.NamespacedName{Namespace: DefaultOperatorNamespace, Name: "fusebox-node-" + node}
	if err := k8sClient.Get(ctx, key, pod); err == nil {
		return pod
	}
	pod = &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: map[string]string{
			resiliencev1alpha1.LabelAppName: resiliencev1alpha1.AppName, resiliencev1alpha1.LabelAppComponent: resiliencev1alpha1.ComponentNodeAgent,
		}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "agent", Image: "fuseboxd"}}},
	}
	Expect(k8sClient.Create(ctx, pod)).To(Succeed())
	return pod
}

// setAgentReady writes node's agent pod's Ready condition, as its kubelet would, moved at
// changed.
func setAgentReady(ctx context.Context, node string, ready corev1.ConditionStatus, changed time.Time) {
	pod := agentOf(ctx, node)
	pod.Status.Phase = corev1.PodRunning
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: ready, LastTransitionTime: metav1.NewTime(changed)}}
	Expect(k8sClient.Status().Update(ctx, pod)).To(Succeed())
}

// asAgent is a client acting as node's agent, as the API server authenticates the
// projected token of its pod: service account fusebox-node of the operator's namespace
// with the extras of a token bound to a pod on a node (node-name, node-uid, pod-name,
// pod-uid), and a role that lets it write node reports. The policy is config/policy's.
func asAgent(ctx context.Context, node string) client.Client {
	n, pod := ensureNode(ctx, node), agentOf(ctx, node)
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "test-node-agent"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{resiliencev1alpha1.GroupVersion.Group}, Resources: []string{"nodebreakerreports"},
			Verbs: []string{"get", "list", "watch", "create", "update", "delete"}}},
	}
	if err := k8sClient.Create(ctx, role); !apierrors.IsAlreadyExists(err) {
		Expect(err).NotTo(HaveOccurred())
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "test-node-agent"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: DefaultOperatorNamespace, Name: "fusebox-node"}},
	}
	if err := k8sClient.Create(ctx, binding); !apierrors.IsAlreadyExists(err) {
		Expect(err).NotTo(HaveOccurred())
	}
	return impersonating(rest.ImpersonationConfig{
		UserName: nodeAgentAccount,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + DefaultOperatorNamespace, "system:authenticated"},
		Extra: map[string][]string{
			"authentication.kubernetes.io/node-name": {node},
			"authentication.kubernetes.io/node-uid":  {string(n.UID)},
			"authentication.kubernetes.io/pod-name":  {pod.Name},
			"authentication.kubernetes.io/pod-uid":   {string(pod.UID)},
		},
	})
}

// asGarbageCollector is a client acting as kube-controller-manager's garbage collector
// (its own service account, with the role the API server bootstraps for it).
func asGarbageCollector() client.Client {
	return impersonating(rest.ImpersonationConfig{
		UserName: "system:serviceaccount:kube-system:generic-garbage-collector",
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"},
	})
}

func impersonating(as rest.ImpersonationConfig) client.Client {
	c := rest.CopyConfig(cfg)
	c.Impersonate = as
	cl, err := client.New(c, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	return cl
}

// boundPod returns the pod of that name, created first (bound to node) if missing.
func boundPod(ctx context.Context, ns, name, node string) *corev1.Pod {
	pod := &corev1.Pod{}
	if err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, pod); err == nil {
		return pod
	}
	pod = &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	Expect(k8sClient.Create(ctx, pod)).To(Succeed())
	return pod
}

// nodeReport is node's report in ns as its agent writes it: named after the node, owned
// by it, one line per pod.
func nodeReport(ctx context.Context, ns, node string, lines ...resiliencev1alpha1.NodePodReport) *resiliencev1alpha1.NodeBreakerReport {
	n := ensureNode(ctx, node)
	return &resiliencev1alpha1.NodeBreakerReport{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: node,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node, UID: n.UID}}},
		NodeName: node,
		Pods:     lines,
	}
}

// podLine is the line of a pod in a node report.
func podLine(pod *corev1.Pod, entries ...resiliencev1alpha1.BreakerReportEntry) resiliencev1alpha1.NodePodReport {
	return resiliencev1alpha1.NodePodReport{Name: pod.Name, UID: pod.UID, Breakers: entries}
}

// writeNodeReport creates or replaces the report as as.
func writeNodeReport(ctx context.Context, as client.Client, rep *resiliencev1alpha1.NodeBreakerReport) error {
	var current resiliencev1alpha1.NodeBreakerReport
	err := as.Get(ctx, client.ObjectKeyFromObject(rep), &current)
	switch {
	case apierrors.IsNotFound(err):
		return as.Create(ctx, rep)
	case err != nil:
		return err
	}
	rep.ResourceVersion = current.ResourceVersion
	return as.Update(ctx, rep)
}

// refused is a matcher for the policy's refusal, saying says.
func refused(says string) OmegaMatcher {
	return And(Satisfy(apierrors.IsForbidden), MatchError(ContainSubstring(says)))
}

// policyEnforced waits until the API server enforces config/policy's node report policy,
// which it does a moment after the suite installs it: a write it admits meanwhile is
// undone by the one identity besides the agent's that may delete.
func policyEnforced(ctx context.Context, ns string) {
	Eventually(func() error {
		probe := nodeReport(ctx, ns, "policy-probe")
		err := k8sClient.Create(ctx, probe)
		if err == nil {
			Expect(asGarbageCollector().Delete(ctx, probe)).To(Succeed())
		}
		return err
	}).Should(refused("written only by the node agent"))
}

var _ = Describe("NodeBreakerReport admission", func() {
	var ns string
	BeforeEach(func(ctx SpecContext) {
		ns = newNamespace(ctx)
		policyEnforced(ctx, ns)
	})

	It("admits a node's own report from its agent, and refuses another node's", func(ctx SpecContext) {
		agentA := asAgent(ctx, "node-a")
		ensureNode(ctx, "node-b")
		Eventually(func() error {
			return agentA.Create(ctx, nodeReport(ctx, ns, "node-b"))
		}).Should(refused("the agent of node node-a may write only the NodeBreakerReport of that node"))
		Expect(writeNodeReport(ctx, agentA, nodeReport(ctx, ns, "node-a"))).To(Succeed())

		By("anyone else: a cluster administrator, a pod, the operator")
		Expect(k8sClient.Create(ctx, nodeReport(ctx, "default", "node-a"))).To(
			refused("NodeBreakerReports are written only by the node agent ("+nodeAgentAccount+")"), "system:masters")
		pod := asPod(ctx, ns, "web")
		// Refused by RBAC first (the breaker-client role holds no node reports), or else by
		// the policy: Forbidden either way.
		Expect(pod.Create(ctx, nodeReport(ctx, ns, "node-c"))).To(Satisfy(apierrors.IsForbidden))
		rep := nodeReport(ctx, ns, "node-a")
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(rep), rep)).To(Succeed())
		rep.Pods = []resiliencev1alpha1.NodePodReport{{Name: "web", UID: "forged", Breakers: []resiliencev1alpha1.BreakerReportEntry{line("b", open, tripped, time.Now())}}}
		Expect(k8sClient.Update(ctx, rep)).To(refused("written only by the node agent"))
		Expect(k8sClient.Delete(ctx, rep)).To(refused("written only by the node agent"))
	})

	It("refuses a report without exactly one ownerReference, to its Node", func(ctx SpecContext) {
		agent := asAgent(ctx, "node-a")
		other := ensureNode(ctx, "node-b")
		for name, owners := range map[string][]metav1.OwnerReference{
			"none":                       nil,
			"another Node":               {{APIVersion: "v1", Kind: "Node", Name: "node-b", UID: other.UID}},
			"a Pod":                      {{APIVersion: "v1", Kind: "Pod", Name: "node-a", UID: "pod-uid"}},
			"two":                        {nodeReport(ctx, ns, "node-a").OwnerReferences[0], {APIVersion: "v1", Kind: "Node", Name: "node-b", UID: other.UID}},
			"its name under another UID": {{APIVersion: "v1", Kind: "Node", Name: "node-a", UID: "not-the-node"}},
		} {
			rep := nodeReport(ctx, ns, "node-a")
			rep.OwnerReferences = owners
			Eventually(func() error { return agent.Create(ctx, rep.DeepCopy()) }).Should(
				refused("the NodeBreakerReport of node node-a must have exactly one ownerReference, to that Node"), name)
		}
	})

	It("keeps nodeName as it was written", func(ctx SpecContext) {
		agent := asAgent(ctx, "node-a")
		rep := nodeReport(ctx, ns, "node-a")
		Eventually(func() error { return writeNodeReport(ctx, agent, rep.DeepCopy()) }).Should(Succeed())
		Expect(agent.Get(ctx, client.ObjectKeyFromObject(rep), rep)).To(Succeed())
		rep.NodeName = "node-b"
		err := agent.Update(ctx, rep)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err).To(MatchError(ContainSubstring("nodeName is immutable")))
	})

	It("lets only the node's agent and the garbage collector delete it", func(ctx SpecContext) {
		agentA, agentB := asAgent(ctx, "node-a"), asAgent(ctx, "node-b")
		for _, node := range []string{"node-a", "node-b"} {
			as := agentA
			if node == "node-b" {
				as = agentB
			}
			Eventually(func() error { return writeNodeReport(ctx, as, nodeReport(ctx, ns, node)) }).Should(Succeed())
		}
		Expect(agentB.Delete(ctx, nodeReport(ctx, ns, "node-a"))).To(
			refused("the agent of node node-b may write only the NodeBreakerReport of that node"), "judged on the stored object")
		Expect(asGarbageCollector().Delete(ctx, nodeReport(ctx, ns, "node-a"))).To(Succeed(), "the garbage collector, for a Node that is gone")
		Expect(agentB.Delete(ctx, nodeReport(ctx, ns, "node-b"))).To(Succeed(), "its own agent")
	})
})

var _ = Describe("Counting node reports", func() {
	var ns string
	BeforeEach(func(ctx SpecContext) { ns = newNamespace(ctx) })

	members := func(g Gomega, ctx context.Context, name string) *resiliencev1alpha1.MemberCounts {
		cb := getBreaker(g, ctx, ns, name)
		g.Expect(cb.Status.MemberCounts).NotTo(BeNil())
		return cb.Status.MemberCounts
	}

	It("drops the line of a pod bound to another node, and says so with an Event", func(ctx SpecContext) {
		Expect(k8sClient.Create(ctx, newBreaker(ns, "carts"))).To(Succeed())
		agent := asAgent(ctx, "node-a")
		setAgentReady(ctx, "node-a", corev1.ConditionTrue, time.Now())
		here, elsewhere := boundPod(ctx, ns, "here", "node-a"), boundPod(ctx, ns, "elsewhere", "node-b")
		Eventually(func() error {
			return writeNodeReport(ctx, agent, nodeReport(ctx, ns, "node-a",
				podLine(here, line("carts", closed, started, time.Now())),
				podLine(elsewhere, line("carts", open, tripped, time.Now()))))
		}).Should(Succeed())
		onlyHere := func(g Gomega) {
			cb := getBreaker(g, ctx, ns, "carts")
			g.Expect(cb.Status.MemberCounts).To(Equal(&resiliencev1alpha1.MemberCounts{Reporting: 1, Closed: 1, OnLatestConfig: 1}))
			g.Expect(listedPods(cb)).To(Equal([]string{"here"}))
			g.Expect(cb.Status.State).To(Equal(resiliencev1alpha1.StateClosed))
		}
		Eventually(onlyHere).Should(Succeed())
		Eventually(func() []string { return eventNotes(ctx, ns, "node-a", resiliencev1alpha1.EventPodNotOnNode) }).Should(
			ConsistOf("1 pods this report claims are not bound to node node-a, so their lines count for nothing: elsewhere"))
		Consistently(onlyHere, "2s").Should(Succeed())

		By("a pod bound to no node is not the node's either")
		pending := ensurePod(ctx, ns, "pending")
		Expect(writeNodeReport(ctx, agent, nodeReport(ctx, ns, "node-a",
			podLine(here, line("carts", closed, started, time.Now())),
			podLine(elsewhere, line("carts", open, tripped, time.Now())),
			podLine(pending, line("carts", open, tripped, time.Now()))))).To(Succeed())
		Consistently(onlyHere, "2s").Should(Succeed())
	})

	It("counts a pod reported both ways once, its node's line first", func(ctx SpecContext) {
		Expect(k8sClient.Create(ctx, newBreaker(ns, "ledger"))).To(Succeed())
		agent := asAgent(ctx, "node-a")
		setAgentReady(ctx, "node-a", corev1.ConditionTrue, time.Now())
		web := boundPod(ctx, ns, "web", "node-a")
		reports(ctx, ns, "web", entry("ledger", "Closed", "Started", time.Now(), 1))
		Eventually(func(g Gomega) {
			g.Expect(*members(g, ctx, "ledger")).To(Equal(resiliencev1alpha1.MemberCounts{Reporting: 1, Closed: 1, OnLatestConfig: 1}))
		}).Should(Succeed())

		Eventually(func() error {
			return writeNodeReport(ctx, agent, nodeReport(ctx, ns, "node-a", podLine(web, line("ledger", open, tripped, time.Now()))))
		}).Should(Succeed())
		once := func(g Gomega) {
			cb := getBreaker(g, ctx, ns, "ledger")
			g.Expect(cb.Status.MemberCounts).To(Equal(&resiliencev1alpha1.MemberCounts{Reporting: 1, Open: 1, OnLatestConfig: 1}))
			g.Expect(cb.Status.State).To(Equal(resiliencev1alpha1.StateOpen))
			g.Expect(listedPods(cb)).To(Equal([]string{"web"}))
		}
		Eventually(once).Should(Succeed())
		Consistently(once, "2s").Should(Succeed())
		Expect(reportExists(ctx, ns, "web")).To(BeTrue(), "the pod's own report is its own: not pruned")

		By("the node's line going, the pod's own report counts again")
		Expect(writeNodeReport(ctx, agent, nodeReport(ctx, ns, "node-a"))).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(*members(g, ctx, "ledger")).To(Equal(resiliencev1alpha1.MemberCounts{Reporting: 1, Closed: 1, OnLatestConfig: 1}))
		}).Should(Succeed())
	})

	It("counts a pod its node's report repeats, or a breaker a line repeats, once: the first", func(ctx SpecContext) {
		// The report's lists are atomic, so the API server keeps no key unique in them.
		Expect(k8sClient.Create(ctx, newBreaker(ns, "search"))).To(Succeed())
		agent := asAgent(ctx, "node-a")
		setAgentReady(ctx, "node-a", corev1.ConditionTrue, time.Now())
		web, api := boundPod(ctx, ns, "web", "node-a"), boundPod(ctx, ns, "api", "node-a")
		Eventually(func() error {
			return writeNodeReport(ctx, agent, nodeReport(ctx, ns, "node-a",
				podLine(web, line("search", closed, started, time.Now())),
				podLine(web, line("search", open, tripped, time.Now())),
				podLine(api, line("search", closed, started, time.Now()), line("search", open, tripped, time.Now()))))
		}).Should(Succeed())
		once := func(g Gomega) {
			cb := getBreaker(g, ctx, ns, "search")
			g.Expect(cb.Status.MemberCounts).To(Equal(&resiliencev1alpha1.MemberCounts{Reporting: 2, Closed: 2, OnLatestConfig: 2}))
			g.Expect(cb.Status.State).To(Equal(resiliencev1alpha1.StateClosed))
		}
		Eventually(once).Should(Succeed())
		Consistently(once, "2s").Should(Succeed())
	})

	It("counts nothing of a node whose agent has not been Ready for the grace, and counts it again once Ready", func(ctx SpecContext) {
		Expect(reconciler.nodeAgentGrace()).To(Equal(suiteNodeAgentGrace))
		Expect(k8sClient.Create(ctx, newBreaker(ns, "search"))).To(Succeed())
		agent := asAgent(ctx, "node-c")
		setAgentReady(ctx, "node-c", corev1.ConditionTrue, time.Now())
		web := boundPod(ctx, ns, "web", "node-c")
		Eventually(func() error {
			return writeNodeReport(ctx, agent, nodeReport(ctx, ns, "node-c", podLine(web, line("search", open, tripped, time.Now()))))
		}).Should(Succeed())
		counted := func(g Gomega) {
			g.Expect(members(g, ctx, "search").Reporting).To(BeEquivalentTo(1))
			g.Expect(getBreaker(g, ctx, ns, "search").Status.State).To(Equal(resiliencev1alpha1.StateOpen))
		}
		Eventually(counted).Should(Succeed())

		By("the agent not Ready for less than the grace: no event comes when it ends, the operator comes back by itself")
		setAgentReady(ctx, "node-c", corev1.ConditionFalse, time.Now().Add(-suiteNodeAgentGrace+time.Second))
		Eventually(func(g Gomega) {
			cb := getBreaker(g, ctx, ns, "search")
			g.Expect(cb.Status.MemberCounts).To(Or(BeNil(), HaveField("Reporting", BeEquivalentTo(0))))
			g.Expect(cb.Status.State).To(BeEmpty())
		}).Should(Succeed())

		By("Ready again")
		setAgentReady(ctx, "node-c", corev1.ConditionTrue, time.Now())
		Eventually(counted).Should(Succeed())
	})
})
