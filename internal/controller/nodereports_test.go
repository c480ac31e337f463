package controller

import (
	"context"
	"fmt"
	"strings"
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
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
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

// boundPod returns the pod of that name, created first (bound to node, wired to its agent
// as the pod webhook wires it, with revision as its pod-template-hash when given) if
// missing.
func boundPod(ctx context.Context, ns, name, node string, revision ...string) *corev1.Pod {
	pod := &corev1.Pod{}
	if err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, pod); err == nil {
		return pod
	}
	pod = &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "app",
			Env: []corev1.EnvVar{{Name: breakerconfig.EnvNodeAgent, Value: "http://10.96.0.10:8476"}}}}},
	}
	if len(revision) > 0 {
		pod.Labels = map[string]string{"pod-template-hash": revision[0]}
	}
	Expect(k8sClient.Create(ctx, pod)).To(Succeed())
	return pod
}

// nodeReport is node's report in ns as its agent writes it: named after the node, owned
// by it, one entry per breaker and revision.
func nodeReport(ctx context.Context, ns, node string, entries ...resiliencev1alpha1.NodeBreakerEntry) *resiliencev1alpha1.NodeBreakerReport {
	n := ensureNode(ctx, node)
	return &resiliencev1alpha1.NodeBreakerReport{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: node,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node, UID: n.UID}}},
		NodeName: node,
		Breakers: entries,
	}
}

// nodeEntry is a node's entry for breaker at no revision: pods pods, open of them open on
// their own evidence (tripped at since), the rest closed, all on generation 1.
func nodeEntry(breaker string, pods, open int32, since time.Time) resiliencev1alpha1.NodeBreakerEntry {
	e := resiliencev1alpha1.NodeBreakerEntry{Name: breaker, Pods: pods, Closed: pods - open, Open: open, EarnedOpen: open,
		ConfigGeneration: 1, OnLatestConfig: pods}
	if open > 0 {
		e.OpenSince = &metav1.MicroTime{Time: since}
	}
	return e
}

// notablePod is pod as a node entry names it: open since since.
func notablePod(pod *corev1.Pod, since time.Time) resiliencev1alpha1.NotablePod {
	return resiliencev1alpha1.NotablePod{Name: pod.Name, UID: pod.UID, Reason: tripped,
		PodCircuit: resiliencev1alpha1.PodCircuit{State: open, Since: metav1.NewTime(since), ConfigGeneration: 1}}
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
		rep.Breakers = []resiliencev1alpha1.NodeBreakerEntry{nodeEntry("b", 1, 1, time.Now())}
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

var _ = Describe("NodeBreakerReport bounds", func() {
	var ns string
	BeforeEach(func(ctx SpecContext) {
		ns = newNamespace(ctx)
		policyEnforced(ctx, ns)
	})

	It("refuses counts that break the schema's or the admission policy's bounds, naming them", func(ctx SpecContext) {
		agent := asAgent(ctx, "node-a")
		web := boundPod(ctx, ns, "web", "node-a")
		for what, tc := range map[string]struct {
			mutate func(*resiliencev1alpha1.NodeBreakerEntry)
			says   string
		}{
			"more pods in a state than pods": {func(e *resiliencev1alpha1.NodeBreakerEntry) { e.Closed = 10 }, "closed, open and halfOpen together must be at most pods"},
			"more earned Opens than Opens":   {func(e *resiliencev1alpha1.NodeBreakerEntry) { e.EarnedOpen = 3 }, "earnedOpen must be at most open"},
			"more failures than calls":       {func(e *resiliencev1alpha1.NodeBreakerEntry) { e.Calls, e.Failures = 5, 6 }, "failures of a window are among its calls"},
			"more accepts than requests":     {func(e *resiliencev1alpha1.NodeBreakerEntry) { e.Requests, e.Accepts = 5, 6 }, "accepts, retries and throttled must each be at most requests"},
			"more notable pods than pods": {func(e *resiliencev1alpha1.NodeBreakerEntry) {
				e.Notable = []resiliencev1alpha1.NotablePod{notablePod(web, time.Now()), notablePod(web, time.Now()), notablePod(web, time.Now())}
			}, "notable may name at most pods pods"},
			"a negative count":            {func(e *resiliencev1alpha1.NodeBreakerEntry) { e.HoldingVerdict = -1 }, "holdingVerdict"},
			"more pods than a node holds": {func(e *resiliencev1alpha1.NodeBreakerEntry) { e.Pods = 5000 }, "pods"},
		} {
			e := nodeEntry("b", 2, 1, time.Now())
			tc.mutate(&e)
			err := writeNodeReport(ctx, agent, nodeReport(ctx, ns, "node-a", e))
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%s: %v", what, err)
			Expect(err).To(MatchError(ContainSubstring(tc.says)), what)
		}
	})

	It("refuses a finalizer and oversized metadata, and lets the garbage collector delete what the agent wrote", func(ctx SpecContext) {
		agent := asAgent(ctx, "node-a")
		rep := nodeReport(ctx, ns, "node-a", nodeEntry("b", 1, 0, time.Now()))
		rep.Finalizers = []string{"example.com/keep"}
		Eventually(func() error { return writeNodeReport(ctx, agent, rep.DeepCopy()) }).Should(refused("may carry no finalizer"))
		rep.Finalizers = nil
		rep.Annotations = map[string]string{"bulk": strings.Repeat("x", 200<<10)}
		Expect(writeNodeReport(ctx, agent, rep.DeepCopy())).To(refused("at most 16 labels and 16 annotations"))
		many := map[string]string{}
		for i := range 17 {
			many[fmt.Sprintf("k%d", i)] = "v"
		}
		rep.Annotations = many
		Expect(writeNodeReport(ctx, agent, rep.DeepCopy())).To(refused("at most 16 labels and 16 annotations"))
		rep.Annotations = map[string]string{"note": "small"}
		Expect(writeNodeReport(ctx, agent, rep.DeepCopy())).To(Succeed())
		Expect(asGarbageCollector().Delete(ctx, nodeReport(ctx, ns, "node-a"))).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(rep), &resiliencev1alpha1.NodeBreakerReport{}))
		}).Should(BeTrue(), "nothing held it back")
	})
})

var _ = Describe("Counting node reports", func() {
	var ns string
	BeforeEach(func(ctx SpecContext) { ns = newNamespace(ctx) })

	counts := func(g Gomega, ctx context.Context, name string) resiliencev1alpha1.MemberCounts {
		cb := getBreaker(g, ctx, ns, name)
		g.Expect(cb.Status.MemberCounts).NotTo(BeNil())
		return *cb.Status.MemberCounts
	}

	It("counts an entry for no more pods than the node runs, drops notable pods bound elsewhere, and says so with an Event", func(ctx SpecContext) {
		Expect(k8sClient.Create(ctx, newBreaker(ns, "carts"))).To(Succeed())
		agent := asAgent(ctx, "node-a")
		setAgentReady(ctx, "node-a", corev1.ConditionTrue, time.Now())
		here, there := boundPod(ctx, ns, "here", "node-a"), boundPod(ctx, ns, "here-too", "node-a")
		elsewhere := boundPod(ctx, ns, "elsewhere", "node-b")
		now := time.Now()
		claim := nodeEntry("carts", 10, 10, now)
		claim.Notable = []resiliencev1alpha1.NotablePod{notablePod(here, now), notablePod(elsewhere, now)}
		Eventually(func() error { return writeNodeReport(ctx, agent, nodeReport(ctx, ns, "node-a", claim)) }).Should(Succeed())
		capped := func(g Gomega) {
			cb := getBreaker(g, ctx, ns, "carts")
			g.Expect(cb.Status.MemberCounts).To(Equal(&resiliencev1alpha1.MemberCounts{Reporting: 2, Open: 2, OnLatestConfig: 2}))
			g.Expect(listedPods(cb)).To(Equal([]string{"here"}))
			g.Expect(cb.Status.Members[0].Node).To(Equal("node-a"))
			g.Expect(cb.Status.State).To(Equal(resiliencev1alpha1.StateOpen))
		}
		Eventually(capped).Should(Succeed())
		Eventually(func() []string { return eventNotes(ctx, ns, "node-a", resiliencev1alpha1.EventPodNotOnNode) }).Should(ConsistOf(
			`This report claims pods that node node-a does not run; each entry counts for the node's own pods alone: carts at revision "": 10 pods claimed, 2 counted, notable pods not bound here: elsewhere`))
		Consistently(capped, "2s").Should(Succeed())

		By("a third pod bound to the node raises what the entry counts for, with no report written")
		boundPod(ctx, ns, "third", "node-a")
		Eventually(func(g Gomega) { g.Expect(counts(g, ctx, "carts").Reporting).To(BeEquivalentTo(3)) }).Should(Succeed())

		By("a pod that finished counts no more")
		setPhase(ctx, ns, there.Name, corev1.PodSucceeded)
		Eventually(func(g Gomega) { g.Expect(counts(g, ctx, "carts").Reporting).To(BeEquivalentTo(2)) }).Should(Succeed())
	})

	It("counts each revision's entry for the pods of that revision the node runs", func(ctx SpecContext) {
		Expect(k8sClient.Create(ctx, newBreaker(ns, "orders"))).To(Succeed())
		agent := asAgent(ctx, "node-a")
		setAgentReady(ctx, "node-a", corev1.ConditionTrue, time.Now())
		boundPod(ctx, ns, "old-1", "node-a", "r1")
		boundPod(ctx, ns, "old-2", "node-a", "r1")
		boundPod(ctx, ns, "new-1", "node-a", "r2")
		old, fresh := nodeEntry("orders", 2, 0, time.Now()), nodeEntry("orders", 3, 3, time.Now())
		old.Revision, fresh.Revision = "r1", "r2"
		Eventually(func() error { return writeNodeReport(ctx, agent, nodeReport(ctx, ns, "node-a", old, fresh)) }).Should(Succeed())
		Eventually(func(g Gomega) {
			cb := getBreaker(g, ctx, ns, "orders")
			g.Expect(cb.Status.MemberCounts).To(Equal(&resiliencev1alpha1.MemberCounts{Reporting: 3, Closed: 2, Open: 1, OnLatestConfig: 3}))
			g.Expect(cb.Status.Revisions).To(HaveLen(2))
			g.Expect(cb.Status.Revisions[0]).To(And(HaveField("Revision", "r1"), HaveField("Pods", BeEquivalentTo(2)), HaveField("State", resiliencev1alpha1.StateClosed)))
			g.Expect(cb.Status.Revisions[1]).To(And(HaveField("Revision", "r2"), HaveField("Pods", BeEquivalentTo(1)), HaveField("State", resiliencev1alpha1.StateOpen)))
		}).Should(Succeed())
	})

	It("counts a pod reported both ways once: a pod wired to its node's agent by its node alone", func(ctx SpecContext) {
		Expect(k8sClient.Create(ctx, newBreaker(ns, "ledger"))).To(Succeed())
		agent := asAgent(ctx, "node-a")
		setAgentReady(ctx, "node-a", corev1.ConditionTrue, time.Now())
		boundPod(ctx, ns, "web", "node-a")
		ensurePod(ctx, ns, "plain") // not wired to an agent: its own report counts
		reports(ctx, ns, "web", entry("ledger", "Closed", "Started", time.Now(), 1))
		reports(ctx, ns, "plain", entry("ledger", "Closed", "Started", time.Now(), 1))
		Eventually(func(g Gomega) {
			g.Expect(counts(g, ctx, "ledger")).To(Equal(resiliencev1alpha1.MemberCounts{Reporting: 1, Closed: 1, OnLatestConfig: 1}), "only plain's own report")
		}).Should(Succeed())

		Eventually(func() error {
			return writeNodeReport(ctx, agent, nodeReport(ctx, ns, "node-a", nodeEntry("ledger", 1, 1, time.Now())))
		}).Should(Succeed())
		once := func(g Gomega) {
			cb := getBreaker(g, ctx, ns, "ledger")
			g.Expect(cb.Status.MemberCounts).To(Equal(&resiliencev1alpha1.MemberCounts{Reporting: 2, Closed: 1, Open: 1, OnLatestConfig: 2}))
			g.Expect(cb.Status.State).To(Equal(resiliencev1alpha1.StateOpen))
		}
		Eventually(once).Should(Succeed())
		Consistently(once, "2s").Should(Succeed())
		Expect(reportExists(ctx, ns, "web")).To(BeTrue(), "the pod's own report is its own: not pruned")
	})

	It("counts a breaker and revision a report repeats once: the first", func(ctx SpecContext) {
		// The list is atomic, so the API server keeps no pair unique in it.
		Expect(k8sClient.Create(ctx, newBreaker(ns, "dup"))).To(Succeed())
		agent := asAgent(ctx, "node-a")
		setAgentReady(ctx, "node-a", corev1.ConditionTrue, time.Now())
		for i := range 4 {
			boundPod(ctx, ns, fmt.Sprintf("web-%d", i), "node-a")
		}
		Eventually(func() error {
			return writeNodeReport(ctx, agent, nodeReport(ctx, ns, "node-a", nodeEntry("dup", 2, 0, time.Now()), nodeEntry("dup", 2, 2, time.Now())))
		}).Should(Succeed())
		once := func(g Gomega) {
			g.Expect(getBreaker(g, ctx, ns, "dup").Status.MemberCounts).To(Equal(&resiliencev1alpha1.MemberCounts{Reporting: 2, Closed: 2, OnLatestConfig: 2}))
		}
		Eventually(once).Should(Succeed())
		Consistently(once, "2s").Should(Succeed())
	})

	It("costs the operator no read around its cache, whatever a node report claims", func(ctx SpecContext) {
		Expect(k8sClient.Create(ctx, newBreaker(ns, "search"))).To(Succeed())
		agent := asAgent(ctx, "node-a")
		setAgentReady(ctx, "node-a", corev1.ConditionTrue, time.Now())
		boundPod(ctx, ns, "real", "node-a")
		before := liveReads.in(ns)
		for i := range 10 {
			e := nodeEntry("search", resiliencev1alpha1.MaxNodePods, resiliencev1alpha1.MaxNodePods, time.Now())
			for k := range resiliencev1alpha1.MaxNotablePods {
				e.Notable = append(e.Notable, resiliencev1alpha1.NotablePod{Name: fmt.Sprintf("ghost-%d-%d", i, k), UID: types.UID(fmt.Sprintf("ghost-uid-%d-%d", i, k)),
					Reason: tripped, PodCircuit: resiliencev1alpha1.PodCircuit{State: open, Since: metav1.Now()}})
			}
			Eventually(func() error { return writeNodeReport(ctx, agent, nodeReport(ctx, ns, "node-a", e)) }).Should(Succeed())
		}
		Eventually(func(g Gomega) {
			cb := getBreaker(g, ctx, ns, "search")
			g.Expect(cb.Status.MemberCounts).To(Equal(&resiliencev1alpha1.MemberCounts{Reporting: 1, Open: 1, OnLatestConfig: 1}))
			g.Expect(cb.Status.Members).To(BeEmpty(), "no ghost is listed")
		}).Should(Succeed())
		Expect(liveReads.in(ns)-before).To(BeZero(), "reads around the cache")
	})

	It("counts nothing of a node whose agent has not been Ready for the grace, and counts it again once Ready", func(ctx SpecContext) {
		Expect(reconciler.nodeAgentGrace()).To(Equal(suiteNodeAgentGrace))
		Expect(k8sClient.Create(ctx, newBreaker(ns, "search"))).To(Succeed())
		agent := asAgent(ctx, "node-c")
		setAgentReady(ctx, "node-c", corev1.ConditionTrue, time.Now())
		boundPod(ctx, ns, "web", "node-c")
		Eventually(func() error {
			return writeNodeReport(ctx, agent, nodeReport(ctx, ns, "node-c", nodeEntry("search", 1, 1, time.Now())))
		}).Should(Succeed())
		counted := func(g Gomega) {
			g.Expect(counts(g, ctx, "search").Reporting).To(BeEquivalentTo(1))
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
