package fleet

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	fuseboxv1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// Node mode (FLEET_NODES=M): what a cluster running the node agents (docs/design.md §9)
// holds, short of kubelets: M Node objects; per node an agent Pod of DaemonSet
// fusebox-node in the operator's namespace, bound to it and Ready (so the operator
// counts its node's reports); the agents' ClusterRole of config/nodeagent bound to
// service account fusebox-node; the fleet's Pods bound to the nodes in equal contiguous
// blocks (so that every other pod of each node trips in an incident) and wired to their
// node's agent (FUSEBOX_NODE_AGENT), each, with real agents, with a real token for its
// node's agent, made by TokenRequest bound to the Pod, audience fusebox.dev/node-agent,
// as the kubelet projects it.

// tokenLifetime outlasts the longest run: a pod reads its token file for every request
// and nothing here rotates it.
const tokenLifetime = 4 * time.Hour

// nodeName is the name of node i of m.
func nodeName(i int) string { return fmt.Sprintf("node-%03d", i) }

// createNodes creates the Node objects, the agents' RBAC and the agents' Ready Pods.
func (h *harness) createNodes(m int) error {
	role, err := clusterRole(filepath.Join("config", "nodeagent", "role.yaml"), nodeAgentRole)
	if err != nil {
		return err
	}
	if _, err := h.cs.RbacV1().ClusterRoles().Create(h.ctx, role, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := h.cs.RbacV1().ClusterRoleBindings().Create(h.ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: nodeAgentRole},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: nodeAgentRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: operatorNamespace, Name: nodeAgentAccount}},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := h.cs.CoreV1().ServiceAccounts(operatorNamespace).Create(h.ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: nodeAgentAccount}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	h.nodeObjs = make([]HostNode, m)
	return parallel(m, func(i int) error {
		node, err := h.cs.CoreV1().Nodes().Create(h.ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName(i)}}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		agent, err := h.cs.CoreV1().Pods(operatorNamespace).Create(h.ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name:   nodeAgentAccount + "-" + node.Name,
				Labels: map[string]string{fuseboxv1.LabelAppName: fuseboxv1.AppName, fuseboxv1.LabelAppComponent: fuseboxv1.ComponentNodeAgent},
			},
			Spec: corev1.PodSpec{NodeName: node.Name, ServiceAccountName: nodeAgentAccount,
				Containers: []corev1.Container{{Name: "fuseboxd", Image: "fuseboxd", Args: []string{"--node"}}}},
		}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		// What the kubelet would report of a started agent: the operator counts a node's
		// reports only while its agent is Ready.
		now := metav1.Now()
		agent.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		}}
		if agent, err = h.cs.CoreV1().Pods(operatorNamespace).UpdateStatus(h.ctx, agent, metav1.UpdateOptions{}); err != nil {
			return err
		}
		h.nodeObjs[i] = HostNode{Name: node.Name, UID: string(node.UID), AgentPod: agent.Name, AgentPodUID: string(agent.UID)}
		return nil
	})
}

// nodeOf is the node pod i of n is bound to: equal contiguous blocks.
func (h *harness) nodeOf(i, n int) int { return i * h.nodes / n }

// createBoundPods creates the fleet's Pods, bound to their nodes, under service account
// app, each wired to its node's agent; with a dir (real agents) it mints each one's token
// for its node's agent into a file of dir. It returns a note of what minting cost.
func (h *harness) createBoundPods(n int, dir string) (string, error) {
	err := h.createPodObjects(namespace, n, func(i int) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("app-%d", i), Labels: map[string]string{"app": "fleet"}},
			Spec: corev1.PodSpec{NodeName: nodeName(h.nodeOf(i, n)), ServiceAccountName: appServiceAccount,
				Containers: []corev1.Container{{Name: "app", Image: "app", Env: []corev1.EnvVar{agentAddress}}}},
		}
	})
	if err != nil {
		return "", fmt.Errorf("create pods: %w", err)
	}
	if err := h.listPods(n); err != nil {
		return "", err
	}
	for i := range h.pods {
		h.pods[i].Node = nodeName(h.nodeOf(i, n))
		if dir != "" {
			h.pods[i].TokenFile = filepath.Join(dir, h.pods[i].Name)
		}
	}
	if dir == "" {
		return fmt.Sprintf("%d pods bound to %d nodes and wired, no tokens (hollow agents check none)", n, h.nodes), nil
	}
	logf("minting %d tokens (TokenRequest, audience %s)", n, breakerconfig.NodeAgentAudience)
	cpu0, api0 := h.cpu(), h.apiWrites()
	start := time.Now()
	err = parallel(n, func(i int) error {
		p := h.pods[i]
		tr, err := h.cs.CoreV1().ServiceAccounts(namespace).CreateToken(h.ctx, appServiceAccount, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
			Audiences:         []string{breakerconfig.NodeAgentAudience},
			ExpirationSeconds: ptr.To(int64(tokenLifetime.Seconds())),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: types.UID(p.UID)},
		}}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("token of %s: %w", p.Name, err)
		}
		return os.WriteFile(p.TokenFile, []byte(tr.Status.Token), 0o600)
	})
	if err != nil {
		return "", err
	}
	took, c := time.Since(start), h.cpu().minus(cpu0)
	note := fmt.Sprintf("%d tokens minted (TokenRequest, 16 at a time) in %s, API server %.2f CPU-s (%.2f ms each); API server: %s",
		n, fmtDur(took), c.apiServer, c.apiServer*1000/float64(n), h.apiWrites().minus(api0))
	logf("%s", note)
	return note, nil
}

// agentAddress is what wires a pod to its node's agent: the variable the pod webhook sets
// (docs/design.md §9), which the operator's pod cache keeps as "wired" and without which
// it counts none of the pod in its node's report. Its value, the agent Service's address,
// is not read here: each pod is given its own agent's loopback address by its host.
var agentAddress = corev1.EnvVar{
	Name:  breakerconfig.EnvNodeAgent,
	Value: fmt.Sprintf("http://%s.%s.svc:%d", nodeAgentAccount, operatorNamespace, breakerconfig.NodeAgentPort),
}

// startNodeHosts starts the node hosts, gives each its share of whole nodes and waits
// until every agent is ready.
func (h *harness) startNodeHosts(count int, deadline time.Time) (string, error) {
	count = min(max(count, 1), h.nodes)
	logf("starting %d node hosts for %d nodes", count, h.nodes)
	start := time.Now()
	h.hostNodes = make([][]HostNode, count)
	for i, n := range h.nodeObjs {
		k := i * count / h.nodes
		h.hostNodes[k] = append(h.hostNodes[k], n)
	}
	for i := range count {
		nh, err := startNodeHost(fmt.Sprint(i), h.cluster.Kubeconfig, h.s.hollow)
		if err != nil {
			return "", err
		}
		h.fleet = append(h.fleet, nh)
	}
	ready := make([]time.Duration, count)
	err := h.fleet.each("StartNodes", func(i int) any {
		return StartNodesArgs{Nodes: h.hostNodes[i], Deadline: deadline.UnixNano()}
	}, func(i int) any { return &ready[i] })
	if err != nil {
		return "", err
	}
	kind := "node agents"
	if h.s.hollow {
		kind = "hollow node agents"
	}
	note := fmt.Sprintf("%d %s in %d node host processes ready in %s", h.nodes, kind, count, fmtDur(time.Since(start)))
	logf("%s", note)
	return note, nil
}

// hostPodsOf splits the pods by host: each host gets the pods bound to its nodes.
func (h *harness) hostPodsOf() [][]HostPod {
	if h.nodes == 0 {
		return [][]HostPod{h.pods}
	}
	hostOf := map[string]int{}
	for k, ns := range h.hostNodes {
		for _, n := range ns {
			hostOf[n.Name] = k
		}
	}
	out := make([][]HostPod, len(h.fleet))
	for _, p := range h.pods {
		out[hostOf[p.Node]] = append(out[hostOf[p.Node]], p)
	}
	return out
}

// parallel runs f(0..n-1), 16 at a time, and returns the first error and how many failed.
func parallel(n int, f func(i int) error) error {
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		first  error
		failed int
		next   atomic.Int64
	)
	for range 16 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					failed++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if first != nil {
		return fmt.Errorf("%d of %d failed, first: %w", failed, n, first)
	}
	return nil
}
