package cluster

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// The node agent as config/nodeagent and the chart's nodeAgent.enabled deploy it, and
// what the pod webhook wires into an opted-in pod (docs/design.md §9), spelled as a user
// reads them: importing breakerconfig would bring the breaker module into this one.
const (
	agentNamespace      = "fusebox-agents"
	agentServiceAccount = "fusebox-node"
	agentService        = "fusebox-node"
	agentPort           = 8476
	agentAnnotation     = "fusebox.dev/node-agent"
	agentAudience       = "fusebox.dev/node-agent"
	agentEnv            = "FUSEBOX_NODE_AGENT"
	agentFieldManager   = "fusebox-node"
	// The example's pods of this namespace, on every node (labelled with the node's
	// place in nodes, from 1).
	agentApp = "agent-app"
)

var agentLabels = client.MatchingLabels{"app.kubernetes.io/name": "fusebox", "app.kubernetes.io/component": "node-agent"}

// agentPods are the node agents' pods that run and are Ready, by node.
func agentPods(ctx context.Context, g Gomega) map[string]corev1.Pod {
	var list corev1.PodList
	g.Expect(k8s.List(ctx, &list, client.InNamespace(operatorNamespace), agentLabels)).To(Succeed())
	out := map[string]corev1.Pod{}
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && podReady(&p) {
			out[p.Spec.NodeName] = p
		}
	}
	return out
}

// waitAgents waits until every node has one Ready agent pod, and returns them by node.
func waitAgents(ctx context.Context, nodes []corev1.Node) map[string]corev1.Pod {
	GinkgoHelper()
	var agents map[string]corev1.Pod
	Eventually(func(g Gomega) {
		agents = agentPods(ctx, g)
		for _, n := range nodes {
			g.Expect(agents).To(HaveKey(n.Name), "no Ready agent on node %s", n.Name)
		}
	}).WithContext(ctx).WithTimeout(3*time.Minute).WithPolling(250*time.Millisecond).Should(Succeed(), "the DaemonSet fusebox-node")
	return agents
}

// agentAppDeployment is the example's Deployment of app.yaml, opted into the node agent
// (and so with no config volume and no API access of its own), pinned to node, replicas
// pods.
func agentAppDeployment(namespace string, place int, node string, replicas int32) *appsv1.Deployment {
	GinkgoHelper()
	var d appsv1.Deployment
	for _, u := range readManifests(filepath.Join(*repoRoot, "examples", "in-cluster", "deploy", "app.yaml")) {
		if u.GetKind() == "Deployment" {
			Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &d)).To(Succeed())
		}
	}
	Expect(d.Name).NotTo(BeEmpty(), "app.yaml has no Deployment")
	forTheSuite(&d)
	labels := map[string]string{"app.kubernetes.io/name": agentApp, "e2e.fusebox.dev/node": fmt.Sprint(place)}
	d.Namespace, d.Name, d.Labels = namespace, fmt.Sprintf("%s-%d", agentApp, place), labels
	d.Spec.Replicas = &replicas
	d.Spec.Selector = &metav1.LabelSelector{MatchLabels: labels}
	d.Spec.Template.Labels = labels
	delete(d.Spec.Template.Annotations, resiliencev1alpha1.AnnotationInject)
	d.Spec.Template.Annotations[agentAnnotation] = "true"
	d.Spec.Template.Spec.TerminationGracePeriodSeconds = ptrInt64(5)
	pinToNode(&d.Spec.Template.Spec, node)
	return &d
}

// agentManifests are the example's identity and breaker in namespace, and nothing else:
// a pod wired to its node's agent needs no RBAC (docs/rbac.md), so a pod of this
// namespace that wrote a report of its own would be refused.
func agentManifests(namespace string, labels map[string]string) string {
	var nsLabels strings.Builder
	for k, v := range labels {
		fmt.Fprintf(&nsLabels, "\n    %s: %q", k, v)
	}
	return `
apiVersion: v1
kind: Namespace
metadata:
  name: ` + namespace + `
  labels:` + nsLabels.String() + `
    e2e.fusebox.dev/suite: "true"
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: in-cluster
  namespace: ` + namespace + `
---
apiVersion: resilience.fusebox.dev/v1alpha1
kind: CircuitBreaker
metadata:
  name: ` + exampleBreaker + `
  namespace: ` + namespace + `
spec:
  openTimeout: 2s
  window: 2s
  failureRatePercent: 50
  minimumThroughput: 5
  successThreshold: 2
  halfOpenPermittedCalls: 1
  mode: Enforce
  scope: Pod
`
}

// nodeReport is the node's NodeBreakerReport in namespace.
func nodeReport(ctx context.Context, namespace, node string) (*resiliencev1alpha1.NodeBreakerReport, error) {
	var rep resiliencev1alpha1.NodeBreakerReport
	err := k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: node}, &rep)
	return &rep, err
}

// tally is what a node report's entries of one breaker add up to, over its revisions.
type tally struct {
	pods, closed, open, halfOpen, earnedOpen, onLatest int32
	generation                                         int64
	notable                                            []string
}

// tallyOf adds up rep's entries of breaker.
func tallyOf(rep *resiliencev1alpha1.NodeBreakerReport, breaker string) tally {
	var t tally
	for _, e := range rep.Breakers {
		if e.Name != breaker {
			continue
		}
		t.pods += e.Pods
		t.closed += e.Closed
		t.open += e.Open
		t.halfOpen += e.HalfOpen
		t.earnedOpen += e.EarnedOpen
		t.onLatest += e.OnLatestConfig
		t.generation = max(t.generation, e.ConfigGeneration)
		for _, p := range e.Notable {
			t.notable = append(t.notable, p.Name)
		}
	}
	return t
}

func entryNamed(entries []resiliencev1alpha1.BreakerReportEntry, name string) *resiliencev1alpha1.BreakerReportEntry {
	for i := range entries {
		if entries[i].Name == name {
			return &entries[i]
		}
	}
	return nil
}

// expectNodeReports checks that each node's report in namespace, written by its agent
// and owned by its Node, counts exactly that node's pods (perNode[i] runs on nodes[i]),
// all in state for the example's breaker, on config generation gen.
func expectNodeReports(ctx context.Context, namespace string, nodes []corev1.Node, perNode [][]corev1.Pod, gen int64, state resiliencev1alpha1.State) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		for i, n := range nodes {
			rep, err := nodeReport(ctx, namespace, n.Name)
			g.Expect(err).NotTo(HaveOccurred(), "node %s's report in %s", n.Name, namespace)
			g.Expect(rep.NodeName).To(Equal(n.Name))
			g.Expect(rep.OwnerReferences).To(HaveLen(1))
			own := rep.OwnerReferences[0]
			g.Expect([]string{own.Kind, own.Name, string(own.UID)}).To(Equal([]string{"Node", n.Name, string(n.UID)}), "the owner of node %s's report", n.Name)
			g.Expect(rep.ManagedFields).To(ContainElement(HaveField("Manager", agentFieldManager)), "written by the node's agent")
			t := tallyOf(rep, exampleBreaker)
			want := int32(len(perNode[i]))
			g.Expect(t.pods).To(Equal(want), "the pods node %s's report counts: its pods, and only them", n.Name)
			g.Expect(t.generation).To(Equal(gen), "the config generation on node %s's report", n.Name)
			g.Expect(t.onLatest).To(Equal(want), "the pods on generation %d, on node %s's report", gen, n.Name)
			byState := map[resiliencev1alpha1.State]int32{resiliencev1alpha1.StateClosed: t.closed, resiliencev1alpha1.StateOpen: t.open, resiliencev1alpha1.StateHalfOpen: t.halfOpen}
			g.Expect(byState[state]).To(Equal(want), "the pods %s on node %s's report: %+v", state, n.Name, t)
		}
	}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())
}

// expectSeenOpen waits until each node's report has counted all of its pods out of Closed
// at once, some on their own evidence: a failing upstream keeps a pod's circuit open but
// for its probes, so a single look may find some half-open.
func expectSeenOpen(ctx context.Context, namespace string, nodes []corev1.Node, perNode [][]corev1.Pod) {
	GinkgoHelper()
	seen := map[string]bool{}
	Eventually(func(g Gomega) {
		for i, n := range nodes {
			rep, err := nodeReport(ctx, namespace, n.Name)
			g.Expect(err).NotTo(HaveOccurred())
			t := tallyOf(rep, exampleBreaker)
			if t.pods == int32(len(perNode[i])) && t.closed == 0 && t.earnedOpen > 0 {
				seen[n.Name] = true
			}
		}
		for _, n := range nodes {
			g.Expect(seen).To(HaveKey(n.Name), "node %s's report never counted all its pods out of Closed", n.Name)
		}
	}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(100 * time.Millisecond).Should(Succeed())
}

// breakerIn is the example's breaker of namespace, as the operator last wrote it.
func breakerIn(ctx context.Context, g Gomega, namespace string) *resiliencev1alpha1.CircuitBreaker {
	var cb resiliencev1alpha1.CircuitBreaker
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: exampleBreaker}, &cb)).To(Succeed())
	return &cb
}

// waitBreaker waits for the breaker of namespace to say it is open (or not), as
// `kubectl wait --for=condition=Open` does.
func waitBreaker(ctx context.Context, namespace string, open bool) {
	GinkgoHelper()
	cond := "condition=Open"
	if !open {
		cond += "=false"
	}
	out, err := kubectl(ctx, "", "-n", namespace, "wait", "--for="+cond, "circuitbreaker/"+exampleBreaker, "--timeout=90s")
	Expect(err).NotTo(HaveOccurred(), out)
}

// askAgent sends method path to the agent pod's own address, as a pod of its node does
// through the Service, with bearer as the pod's token; it returns the status and body.
func askAgent(ctx context.Context, agent *corev1.Pod, method, path, bearer, body string) (int, string, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, fmt.Sprintf("http://%s:%d%s", agent.Status.PodIP, agentPort, path), rd)
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+bearer)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := podClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// deleteSuiteNamespaces deletes the namespaces the node agent's specs made, without
// waiting for them to go.
func deleteSuiteNamespaces(ctx context.Context, names ...string) {
	GinkgoHelper()
	for _, name := range names {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		Expect(client.IgnoreNotFound(k8s.Delete(ctx, ns))).To(Succeed(), "delete namespace %s", name)
	}
}

// isNotFound tells a report gone from a read that failed.
func isNotFound(err error) bool { return apierrors.IsNotFound(err) }
