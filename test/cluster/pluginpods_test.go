package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// `kubectl fusebox pods` on two real nodes (docs/plugin.md, "A breaker's pods"): the
// built plugin finds the node agents, requests a token of fusebox-node-reader, and reads
// each agent's pods through the API server's pods/proxy, which envtest cannot do (it has
// no kubelet to proxy to).

// readerRole is the Role the chart grants in the operator's namespace, which a user is
// bound to for `kubectl fusebox pods`.
const readerRole = "fusebox-node-reader"

// kubectlFusebox runs the built plugin as the cluster's admin (or as whom args say, with
// --as), and returns its standard output and, apart, its errors.
func kubectlFusebox(ctx context.Context, args ...string) (string, string, error) {
	bin := need("KUBECTL_FUSEBOX (-plugin)", *pluginBin)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+os.Getenv("KUBECONFIG"))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	GinkgoWriter.Printf("$ kubectl fusebox %s\n%s%s", strings.Join(args, " "), out.String(), errOut.String())
	return out.String(), errOut.String(), err
}

// breakerPods is what `kubectl fusebox pods -o json` prints, as far as these specs read
// it.
type breakerPods struct {
	Kind string `json:"kind"`
	Pods []struct {
		Pod     string `json:"pod"`
		UID     string `json:"uid"`
		Node    string `json:"node"`
		Via     string `json:"via"`
		Agent   string `json:"agent"`
		Circuit struct {
			Name  string `json:"name"`
			State string `json:"state"`
		} `json:"circuit"`
	} `json:"pods"`
	Unanswered []struct {
		Agent, Node, Reason string
	} `json:"unanswered"`
	Agents int `json:"agents"`
}

// expectPluginPods checks that `kubectl fusebox pods` lists every pod of both nodes (pods
// [i] run on nodes[i]), each on its node, read through its node's agent; as the admin,
// and as a user with the Role fusebox-node-reader and nothing more in the operator's
// namespace.
func expectPluginPods(ctx context.Context, nodes []corev1.Node, perNode [][]corev1.Pod) {
	GinkgoHelper()
	args := []string{"-n", agentNamespace, "pods", exampleBreaker, "--fusebox-namespace", operatorNamespace}
	check := func(g Gomega, extra ...string) {
		out, errOut, err := kubectlFusebox(ctx, append(append([]string{}, extra...), append(args, "-o", "json")...)...)
		g.Expect(err).NotTo(HaveOccurred(), "stderr: %s", errOut)
		var v breakerPods
		g.Expect(json.Unmarshal([]byte(out), &v)).To(Succeed(), out)
		g.Expect(v.Kind).To(Equal("BreakerPods"))
		g.Expect(v.Unanswered).To(BeEmpty(), "every node's agent answers through pods/proxy")
		g.Expect(v.Agents).To(Equal(len(nodes)))
		onNode := map[string]string{}
		for _, p := range v.Pods {
			g.Expect(p.Via).To(Equal("NodeAgent"), "pod %s", p.Pod)
			g.Expect(p.Circuit.Name).To(Equal(exampleBreaker))
			onNode[p.UID] = p.Node
		}
		for i, n := range nodes {
			for _, p := range perNode[i] {
				g.Expect(onNode).To(HaveKeyWithValue(string(p.UID), n.Name), "pod %s of node %s", p.Name, n.Name)
			}
		}
	}
	Eventually(func(g Gomega) { check(g) }).WithContext(ctx).Should(Succeed())

	// The table a person reads: a row per pod, on its node.
	out, _, err := kubectlFusebox(ctx, args...)
	Expect(err).NotTo(HaveOccurred())
	Expect(strings.Fields(strings.SplitN(out, "\n", 2)[0])).To(Equal([]string{"NODE", "POD", "REVISION", "STATE", "REASON", "SINCE", "CALLS", "FAILURE%", "CONFIG"}))
	for i, n := range nodes {
		for _, p := range perNode[i] {
			Expect(out).To(MatchRegexp(`(?m)^%s\s+%s\s`, n.Name, p.Name), "the row of pod %s on node %s", p.Name, n.Name)
		}
	}
	Expect(out).NotTo(ContainSubstring("did not answer"))

	// A user with the Role the chart ships, and with reading the breaker in its own
	// namespace, sees the same: the token, the agents' pods and pods/proxy are all the
	// Role grants.
	user := "e2e-oncall"
	for _, o := range []client.Object{
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: "e2e-" + readerRole},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: readerRole},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
		},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: agentNamespace, Name: "e2e-breaker-reader"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"resilience.fusebox.dev"}, Resources: []string{"circuitbreakers"}, Verbs: []string{"get"}},
			{APIGroups: []string{"resilience.fusebox.dev"}, Resources: []string{"breakerreports"}, Verbs: []string{"list"}},
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}},
		}},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: agentNamespace, Name: "e2e-breaker-reader"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "e2e-breaker-reader"},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
		},
	} {
		Expect(k8s.Create(ctx, o)).To(Succeed(), "%T %s", o, o.GetName())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8s.Delete(ctx, o))).To(Succeed()) })
	}
	// The authorizer's cache takes the bindings in a moment.
	Eventually(func(g Gomega) { check(g, "--as", user) }).WithContext(ctx).Should(Succeed(), "as %s, bound to the Role %s", user, readerRole)
}
