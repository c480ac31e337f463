package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// A namespace of its own: nothing of Fusebox in it, only the cluster's network.
const networkNamespace = "fusebox-nodes"

// What hack/cluster/netcheck answers on GET /.
type netIdentity struct {
	Pod  string `json:"pod"`
	Node string `json:"node"`
	From string `json:"from"`
}

// netcheckPod is a pod of hack/cluster/netcheck pinned to node, as restricted as Pod
// Security allows, with an image the node must have already: Never is never pulled.
func netcheckPod(name, node string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: networkNamespace, Name: name, Labels: map[string]string{
			"app.kubernetes.io/name": "netcheck", "e2e.fusebox.dev/pod": name,
		}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](2),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name: "netcheck", Image: *netcheckImage, ImagePullPolicy: corev1.PullNever,
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				Env: []corev1.EnvVar{
					{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
					{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
				},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					ReadOnlyRootFilesystem:   ptr.To(true),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}
	pinToNode(&p.Spec, node)
	return p
}

// netcheckService selects the netcheck pods matching selector on port 80; local keeps a
// caller on its own node's endpoints (internalTrafficPolicy Local, as the node agent's
// Service has it: design.md §9).
func netcheckService(name string, selector map[string]string, local bool) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: networkNamespace, Name: name},
		Spec: corev1.ServiceSpec{
			Selector: selector,
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}},
		},
	}
	if local {
		s.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
	}
	return s
}

// askPod is GET path on the pod's own address, from the suite (the first node's network
// namespace), retried while the pod is not answering yet.
func askPod(ctx context.Context, p *corev1.Pod, path string) (code int, body string, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.Status.PodIP+":8080"+path, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := podClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// fetchFrom makes the pod itself GET target and returns who answered: the request goes
// from the pod's network namespace, over its node's routes.
func fetchFrom(ctx context.Context, p *corev1.Pod, target string) (netIdentity, error) {
	var id netIdentity
	code, body, err := askPod(ctx, p, "/fetch?url="+url.QueryEscape(target))
	if err != nil {
		return id, fmt.Errorf("ask pod %s: %w", p.Name, err)
	}
	if code != http.StatusOK {
		return id, fmt.Errorf("pod %s GET %s: %d %s", p.Name, target, code, strings.TrimSpace(body))
	}
	return id, json.Unmarshal([]byte(body), &id)
}

// imageNames are the names containerd may list ref under: as given, or normalized onto
// Docker Hub when it names no registry.
func imageNames(ref string) []string {
	names := []string{ref}
	if first, _, ok := strings.Cut(ref, "/"); !ok || !strings.ContainsAny(first, ".:") && first != "localhost" {
		if !ok {
			names = append(names, "docker.io/library/"+ref)
		} else {
			names = append(names, "docker.io/"+ref)
		}
	}
	return names
}

// networkSpecs are the cluster's own: pods on each node reaching the other's, with
// nothing of Fusebox in the way. They run first in the suite's one ordered container
// (cluster_test.go), before the spec that deletes a node.
func networkSpecs() {
	// One netcheck pod per node, a Service per pod, and one Service over all of them that
	// keeps each caller on its own node.
	var (
		nodes    []corev1.Node
		perNode  []corev1.Pod // perNode[i] runs on nodes[i]
		services []corev1.Service
		local    corev1.Service
	)

	BeforeAll(func(ctx SpecContext) {
		connect()
		need("NETCHECK_IMAGE (-netcheck-image)", *netcheckImage)
		nodes = needNodes(ctx, 2)
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: networkNamespace, Labels: map[string]string{
			"pod-security.kubernetes.io/enforce": "restricted",
		}}}
		Expect(k8s.Create(ctx, ns)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) {
			Expect(client.IgnoreNotFound(k8s.Delete(ctx, ns))).To(Succeed())
		}, NodeTimeout(time.Minute))

		start := time.Now()
		for i := range nodes {
			name := fmt.Sprintf("netcheck-%d", i+1)
			Expect(k8s.Create(ctx, netcheckPod(name, nodes[i].Name))).To(Succeed())
			svc := netcheckService(name, map[string]string{"e2e.fusebox.dev/pod": name}, false)
			Expect(k8s.Create(ctx, svc)).To(Succeed())
			services = append(services, *svc)
		}
		svc := netcheckService("netcheck-local", map[string]string{"app.kubernetes.io/name": "netcheck"}, true)
		Expect(k8s.Create(ctx, svc)).To(Succeed())
		local = *svc

		Eventually(func(g Gomega) {
			perNode = perNode[:0]
			for i := range nodes {
				var p corev1.Pod
				g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: networkNamespace, Name: fmt.Sprintf("netcheck-%d", i+1)}, &p)).To(Succeed())
				for _, c := range p.Status.ContainerStatuses {
					if w := c.State.Waiting; w != nil && w.Reason == "ErrImageNeverPull" {
						StopTrying(fmt.Sprintf("node %s does not have %s: %s", p.Spec.NodeName, *netcheckImage, w.Message)).Now()
					}
				}
				g.Expect(running(&p)).To(BeTrue(), "pod %s on %s: %s", p.Name, p.Spec.NodeName, p.Status.Phase)
				perNode = append(perNode, p)
			}
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())
		record("a pod pinned to each of 2 nodes: created → both Running", time.Since(start), "netcheck image, loaded once, pull policy Never")
	}, NodeTimeout(4*time.Minute))

	It("runs an image loaded once on every node, each pod where it was pinned", func(ctx SpecContext) {
		for i, p := range perNode {
			Expect(p.Spec.NodeName).To(Equal(nodes[i].Name), "pod %s", p.Name)
			Expect(p.Status.HostIP).To(Equal(nodeAddress(&nodes[i])), "pod %s's node address", p.Name)
		}
		Expect(perNode[0].Status.PodIP).NotTo(Equal(perNode[1].Status.PodIP))
		// Every image make test-cluster loaded, on every node: the kubelet lists what its
		// own containerd has.
		loaded := []string{*image, *rebuiltImage, *exampleImage, *fuseboxdImage, *workerImage, *netcheckImage}
		Eventually(func(g Gomega) {
			for _, n := range clusterNodes(ctx) {
				var have []string
				for _, img := range n.Status.Images {
					have = append(have, img.Names...)
				}
				for _, want := range loaded {
					if want != "" {
						g.Expect(have).To(ContainElement(BeElementOf(imageNames(want))), "node %s lacks %s", n.Name, want)
					}
				}
			}
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed(), "the kubelets report their images every nodeStatusUpdateFrequency (5 s)")
	}, SpecTimeout(2*time.Minute))

	It("reaches the pod on the other node by its pod IP, with the caller's address unchanged", func(ctx SpecContext) {
		for i := range perNode {
			from, to := &perNode[i], &perNode[1-i]
			var id netIdentity
			Eventually(func() (err error) {
				id, err = fetchFrom(ctx, from, "http://"+to.Status.PodIP+":8080/")
				return err
			}).WithContext(ctx).WithTimeout(30*time.Second).Should(Succeed(), "from %s on %s to %s on %s", from.Name, from.Spec.NodeName, to.Name, to.Spec.NodeName)
			Expect(id).To(Equal(netIdentity{Pod: to.Name, Node: to.Spec.NodeName, From: from.Status.PodIP}),
				"pods reach each other without address translation, over the route to the other node's pod range")
		}
	}, SpecTimeout(2*time.Minute))

	It("reaches a Service backed only by the pod on the other node, through its own node's kube-proxy", func(ctx SpecContext) {
		for i := range perNode {
			from, to, svc := &perNode[i], &perNode[1-i], &services[1-i]
			target := "http://" + svc.Spec.ClusterIP + ":80/"
			var id netIdentity
			Eventually(func() (err error) {
				id, err = fetchFrom(ctx, from, target)
				return err
			}).WithContext(ctx).WithTimeout(30*time.Second).Should(Succeed(), "from %s to Service %s", from.Name, svc.Name)
			Expect(id).To(Equal(netIdentity{Pod: to.Name, Node: to.Spec.NodeName, From: from.Status.PodIP}),
				"Service %s from %s: a pod's call to a Service is not masqueraded (kube-proxy's clusterCIDR is every node's pods)", svc.Name, from.Name)
		}
	}, SpecTimeout(2*time.Minute))

	It("keeps a caller on its own node's pod behind a Service with internalTrafficPolicy Local", func(ctx SpecContext) {
		target := "http://" + local.Spec.ClusterIP + ":80/"
		for i := range perNode {
			from := &perNode[i]
			// Several calls: with both pods as endpoints a random pick would find the
			// other within a few.
			Eventually(func(g Gomega) {
				for range 8 {
					id, err := fetchFrom(ctx, from, target)
					g.Expect(err).NotTo(HaveOccurred())
					g.Expect(id.Node).To(Equal(from.Spec.NodeName), "a call from %s left its node", from.Name)
				}
			}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
		}
	}, SpecTimeout(2*time.Minute))

	It("runs a command in each node's own network namespace (hack/cluster.sh exec --node)", func(ctx SpecContext) {
		for i := range nodes {
			out, err := inNode(ctx, nodes[i].Name, "ip", "-4", "-o", "addr", "show")
			Expect(err).NotTo(HaveOccurred())
			Expect(out).To(ContainSubstring(" "+nodeAddress(&nodes[i])+"/"), "node %s's address", nodes[i].Name)
			Expect(out).NotTo(ContainSubstring(" "+nodeAddress(&nodes[1-i])+"/"), "the other node's address in %s's namespace", nodes[i].Name)
		}
		_, err := inNode(ctx, "no-such-node", "true")
		Expect(err).To(MatchError(ContainSubstring("no node named 'no-such-node'")))
	}, SpecTimeout(time.Minute))
}
