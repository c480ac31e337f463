package cluster

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
)

// The hooks for specs about more than one node (the node agent's, agentspecs_test.go):
// which nodes there are, pinning a pod to one, and running a command in a node's network
// namespace. hack/cluster.sh up --nodes 2 starts the second node; the suite runs in the
// first node's network namespace, from where every node's address and pod range is
// routed.

// twoNodes labels the specs that need two nodes: test/cluster/run.sh --nodes 1 leaves
// them out, and each also says so itself (needNodes) when run on fewer.
var twoNodes = Label("two-nodes")

// clusterNodes are the cluster's nodes, sorted by name (the first node's name sorts
// first: hack/cluster/env.sh names the others after it).
func clusterNodes(ctx context.Context) []corev1.Node {
	GinkgoHelper()
	var list corev1.NodeList
	Expect(k8s.List(ctx, &list)).To(Succeed())
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	return list.Items
}

// nodeNames are the names of the cluster's nodes, sorted.
func nodeNames(ctx context.Context) []string {
	GinkgoHelper()
	var out []string
	for _, n := range clusterNodes(ctx) {
		out = append(out, n.Name)
	}
	return out
}

// needNodes waits for n nodes to be Ready and returns them, sorted by name; with fewer
// nodes registered it fails under CI and skips otherwise, saying how to get them.
func needNodes(ctx context.Context, n int) []corev1.Node {
	GinkgoHelper()
	if have := len(clusterNodes(ctx)); have < n {
		unavailable("the cluster has %d node(s) and this spec needs %d: test/cluster/run.sh --nodes %d, or hack/cluster.sh up --nodes %d", have, n, n, n)
	}
	var nodes []corev1.Node
	Eventually(func(g Gomega) {
		nodes = clusterNodes(ctx)
		for i := range nodes {
			g.Expect(nodeReady(&nodes[i])).To(BeTrue(), "node %s is not Ready", nodes[i].Name)
		}
	}).WithContext(ctx).WithTimeout(2*time.Minute).Should(Succeed(), "a node registered but not Ready (up waits for them: a node that stopped?)")
	return nodes[:n]
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// nodeAddress is the node's InternalIP, where its kubelet serves and its own processes
// (kube-proxy, a hostNetwork pod) have their address.
func nodeAddress(n *corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}

// pinToNode makes the scheduler put the pods of spec on the named node only, as a
// Deployment's template or a single pod asks (the label is the kubelet's own).
func pinToNode(spec *corev1.PodSpec, node string) {
	if spec.NodeSelector == nil {
		spec.NodeSelector = map[string]string{}
	}
	spec.NodeSelector[corev1.LabelHostname] = node
}

// clusterScript is hack/cluster.sh, run with the suite's environment and the state
// directory it was given.
func clusterScript(ctx context.Context, args ...string) *exec.Cmd {
	GinkgoHelper()
	// Absolute: a command's relative path is taken from its working directory.
	script, err := filepath.Abs(filepath.Join(*repoRoot, "hack", "cluster.sh"))
	Expect(err).NotTo(HaveOccurred())
	cmd := exec.CommandContext(ctx, script, args...)
	cmd.Env = os.Environ()
	if *clusterState != "" {
		cmd.Env = append(cmd.Env, "FUSEBOX_CLUSTER_DIR="+*clusterState)
	}
	return cmd
}

// inNode runs a command in the named node's network namespace (hack/cluster.sh exec
// --node), on this machine's file system, and returns its standard output; what it
// printed on stderr is in the error.
func inNode(ctx context.Context, node string, args ...string) (string, error) {
	cmd := clusterScript(ctx, append([]string{"exec", "--node", node, "--"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	GinkgoWriter.Printf("$ hack/cluster.sh exec --node %s -- %s\n%s%s", node, strings.Join(args, " "), stdout.String(), stderr.String())
	if err != nil {
		return stdout.String(), &scriptError{err: err, stderr: stderr.String()}
	}
	return stdout.String(), nil
}

type scriptError struct {
	err    error
	stderr string
}

func (e *scriptError) Error() string { return e.err.Error() + ": " + strings.TrimSpace(e.stderr) }
func (e *scriptError) Unwrap() error { return e.err }
