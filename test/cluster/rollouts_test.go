package cluster

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// The rollout gate with the real Argo Rollouts controller (docs/rollouts.md), built by
// hack/rollouts.sh from its Go module and run here as a process in the cluster's network
// namespace, under a token of its own ClusterRole, as its Deployment would run it. The
// example's Rollout (examples/rollouts) runs the AnalysisTemplate of examples/rollouts in
// its canary step; the specs change its pod template three times.
const (
	rolloutsNamespace = "fusebox-rollouts"
	rolloutName       = "in-cluster"
	// The controller's own namespace and identity, as its install manifests name them.
	argoNamespace = "argo-rollouts"
	argoAccount   = "argo-rollouts"
	gateService   = "fusebox-gate"
	// The container of the specs below, as cluster_test.go names it.
	rolloutsContainer = "rollout gates with Argo Rollouts"
)

var (
	rolloutGVK     = schemaKind("Rollout")
	analysisRunGVK = schemaKind("AnalysisRun")
	// rolloutsLog is the controller's log file, once it runs.
	rolloutsLog string
)

// A failed rollout spec shows what the controller said.
var _ = ReportAfterEach(func(r SpecReport) {
	if !r.Failed() || rolloutsLog == "" || !slices.Contains(r.ContainerHierarchyTexts, rolloutsContainer) {
		return
	}
	b, _ := os.ReadFile(rolloutsLog)
	fmt.Fprintf(GinkgoWriter, "--- log of rollouts-controller (tail)\n%s\n", tail(string(b), 60))
})

func schemaKind(kind string) metav1.GroupVersionKind {
	return metav1.GroupVersionKind{Group: "argoproj.io", Version: "v1alpha1", Kind: kind}
}

func newArgo(gvk metav1.GroupVersionKind) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(gvk.Group + "/" + gvk.Version)
	u.SetKind(gvk.Kind)
	return u
}

func rolloutSpecs() {
	BeforeAll(func(ctx SpecContext) {
		dir := need("the Argo Rollouts build (-rollouts, hack/rollouts.sh)", *rolloutsDir)
		installArgoCRDs(ctx, dir)
		startRolloutsController(ctx, dir)
		deployExampleRollout(ctx)
	}, NodeTimeout(6*time.Minute))

	It("promotes a healthy canary", func(ctx SpecContext) {
		start := time.Now()
		hash := changeTemplate(ctx, map[string]string{"RELEASE": "2"})
		run := waitAnalysisRun(ctx, hash, "Successful")
		Eventually(func(g Gomega) {
			r := rolloutNow(g, ctx)
			g.Expect(nested(r, "status", "stableRS")).To(Equal(hash), "the canary is the stable revision")
			g.Expect(nested(r, "status", "phase")).To(Equal("Healthy"))
		}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
		record("canary → gate Successful → promoted", time.Since(start), "Argo Rollouts' web provider, initialDelay 15 s")
		Expect(measurementValues(run)).To(HaveEach("Successful"))
	}, SpecTimeout(5*time.Minute))

	It("aborts the rollout when only the canary's pods call a failing upstream", func(ctx SpecContext) {
		stable := stableHash(ctx)
		start := time.Now()
		hash := changeTemplate(ctx, map[string]string{"RELEASE": "3", "UPSTREAM_HEALTH": "down"})
		run := waitAnalysisRun(ctx, hash, "Failed")
		Eventually(func(g Gomega) {
			r := rolloutNow(g, ctx)
			g.Expect(nested(r, "status", "abort")).To(BeTrue(), "the rollout is aborted")
			g.Expect(nested(r, "status", "stableRS")).To(Equal(stable), "the stable revision stays")
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
		record("failing canary → gate Failed → aborted", time.Since(start), "only the canary's pods call the failing upstream")
		Expect(measurementValues(run)).To(ContainElement("Failed"))
		cb := gatedBreaker(ctx)
		Expect(cb.Status.Revisions).To(ContainElement(And(HaveField("Revision", hash), HaveField("State", resiliencev1alpha1.StateOpen))))

		By("back to the stable template: Argo Rollouts takes it as a rollback, with no analysis")
		changeTemplate(ctx, map[string]string{"RELEASE": "2", "UPSTREAM_HEALTH": "up"})
		Eventually(func(g Gomega) {
			r := rolloutNow(g, ctx)
			g.Expect(nested(r, "status", "phase")).To(Equal("Healthy"))
			g.Expect(nested(r, "status", "currentPodHash")).To(Equal(stable))
		}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
	}, SpecTimeout(8*time.Minute))

	It("pauses, and does not abort, when the upstream fails for both revisions", func(ctx SpecContext) {
		stable := stableHash(ctx)
		// The stable pods' upstream fails first, and their breakers open on their own calls.
		setUpstream(ctx, readyPods(ctx, stable), "down")
		Eventually(func(g Gomega) {
			cb := gatedBreaker(ctx)
			g.Expect(cb.Status.Revisions).To(ContainElement(And(HaveField("Revision", stable), HaveField("State", resiliencev1alpha1.StateOpen))))
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
		start := time.Now()
		hash := changeTemplate(ctx, map[string]string{"RELEASE": "4", "UPSTREAM_HEALTH": "down"})
		run := waitAnalysisRun(ctx, hash, "Inconclusive")
		Eventually(func(g Gomega) {
			r := rolloutNow(g, ctx)
			// status.abort is absent until a rollout is aborted (BeTrue refuses a nil).
			aborted, _ := nested(r, "status", "abort").(bool)
			g.Expect(aborted).To(BeFalse(), "the rollout must not be aborted")
			conds, _, _ := unstructured.NestedSlice(r.Object, "status", "pauseConditions")
			g.Expect(conds).To(ContainElement(HaveKeyWithValue("reason", "InconclusiveAnalysisRun")))
			g.Expect(nested(r, "status", "stableRS")).To(Equal(stable))
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
		record("shared outage → gate Inconclusive → paused", time.Since(start), "the canary's and the stable pods' upstream fails")
		Expect(measurementValues(run)).To(ContainElement("Inconclusive"))
	}, SpecTimeout(5*time.Minute))
}

// installArgoCRDs creates the Argo Rollouts CRDs of the module's manifests/crds and waits
// until the API server serves them.
func installArgoCRDs(ctx context.Context, dir string) {
	GinkgoHelper()
	files, err := filepath.Glob(filepath.Join(dir, "crds", "*.yaml"))
	Expect(err).NotTo(HaveOccurred())
	Expect(files).NotTo(BeEmpty(), "no CRDs in %s/crds", dir)
	for _, f := range files {
		for _, u := range readManifests(f) {
			apply(ctx, u)
			Eventually(func(g Gomega) {
				// Unstructured: the suite's scheme has no apiextensions types.
				crd := &unstructured.Unstructured{}
				crd.SetAPIVersion("apiextensions.k8s.io/v1")
				crd.SetKind("CustomResourceDefinition")
				g.Expect(k8s.Get(ctx, client.ObjectKey{Name: u.GetName()}, crd)).To(Succeed())
				conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
				established := false
				for _, c := range conds {
					m, _ := c.(map[string]any)
					established = established || (m["type"] == "Established" && m["status"] == "True")
				}
				g.Expect(established).To(BeTrue(), "CRD %s established", u.GetName())
			}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
		}
	}
}

// startRolloutsController runs rollouts-controller under a token of its own ClusterRole
// (the module's manifests/role), until the spec container ends. It dies with the suite
// (Pdeathsig), so no run leaves it behind on the host.
func startRolloutsController(ctx context.Context, dir string) {
	GinkgoHelper()
	ensureNamespace(ctx, argoNamespace)
	sa := serviceAccount(ctx, argoNamespace, argoAccount)
	var role rbacv1.ClusterRole
	data, err := os.ReadFile(filepath.Join(dir, "clusterrole.yaml"))
	Expect(err).NotTo(HaveOccurred())
	Expect(yaml.Unmarshal(data, &role)).To(Succeed())
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&role)
	Expect(err).NotTo(HaveOccurred())
	obj := &unstructured.Unstructured{Object: u}
	obj.SetAPIVersion("rbac.authorization.k8s.io/v1")
	obj.SetKind("ClusterRole")
	apply(ctx, obj)
	Expect(client.IgnoreAlreadyExists(k8s.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: argoAccount},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: sa.Namespace}},
	}))).To(Succeed())

	// Its kubeconfig: the cluster of the suite's, the service account's token.
	work := GinkgoT().TempDir()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["cluster"] = &clientcmdapi.Cluster{Server: adminConfig.Host, CertificateAuthority: adminConfig.CAFile, CertificateAuthorityData: adminConfig.CAData}
	kc.AuthInfos[argoAccount] = &clientcmdapi.AuthInfo{Token: longToken(ctx, sa)}
	kc.Contexts["argo-rollouts"] = &clientcmdapi.Context{Cluster: "cluster", AuthInfo: argoAccount, Namespace: argoNamespace}
	kc.CurrentContext = "argo-rollouts"
	kubeconfig := filepath.Join(work, "kubeconfig")
	Expect(clientcmd.WriteToFile(*kc, kubeconfig)).To(Succeed())

	logDir := work
	if *clusterState != "" {
		logDir = filepath.Join(*clusterState, "logs")
	}
	logPath := filepath.Join(logDir, "rollouts-controller.log")
	logFile, err := os.Create(logPath)
	Expect(err).NotTo(HaveOccurred())
	const healthz = 18090
	cmd := exec.Command(filepath.Join(dir, "rollouts-controller"), "--kubeconfig", kubeconfig,
		"--leader-elect=false", "--healthzPort", strconv.Itoa(healthz), "--metricsPort", strconv.Itoa(healthz+1),
		"--loglevel", "info")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + work}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	Expect(cmd.Start()).To(Succeed())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	DeferCleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		_ = logFile.Close()
	})
	rolloutsLog = logPath
	Eventually(func() error {
		select {
		case err := <-exited:
			exited <- err
			b, _ := os.ReadFile(logPath)
			StopTrying(fmt.Sprintf("rollouts-controller exited: %v\n%s", err, tail(string(b), 40))).Now()
		default:
		}
		resp, err := podClient.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", healthz))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("healthz: %s", resp.Status)
		}
		return nil
	}).WithContext(ctx).WithTimeout(2*time.Minute).WithPolling(500*time.Millisecond).Should(Succeed(), "rollouts-controller healthy")
}

// longToken is a token of sa that outlives the suite's run.
func longToken(ctx context.Context, sa *corev1.ServiceAccount) string {
	GinkgoHelper()
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](2 * 3600)}}
	got, err := clientset.CoreV1().ServiceAccounts(sa.Namespace).CreateToken(ctx, sa.Name, req, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred(), "TokenRequest for %s/%s", sa.Namespace, sa.Name)
	return got.Status.Token
}

// deployExampleRollout applies examples/rollouts as its files say, with the suite's
// image, the example's control endpoint on, and the gate's Service by address (the node
// has no DNS), and waits for the first revision to be Healthy.
func deployExampleRollout(ctx context.Context) {
	GinkgoHelper()
	dir := filepath.Join(*repoRoot, "examples", "rollouts")
	var rollout *unstructured.Unstructured
	for _, u := range readManifests(filepath.Join(dir, "rollout.yaml")) {
		if u.GetKind() == "Rollout" {
			rollout = u
			continue
		}
		apply(ctx, u)
	}
	Expect(rollout).NotTo(BeNil(), "rollout.yaml has a Rollout")
	for _, f := range []string{"gate-access.yaml", "analysistemplate.yaml"} {
		for _, u := range readManifests(filepath.Join(dir, f)) {
			u.SetNamespace(rolloutsNamespace)
			if u.GetKind() == "AnalysisTemplate" {
				useGateAddress(ctx, u)
			}
			apply(ctx, u)
		}
	}
	Eventually(func(g Gomega) {
		var s corev1.Secret
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: rolloutsNamespace, Name: "fusebox-gate-token"}, &s)).To(Succeed())
		g.Expect(s.Data["token"]).NotTo(BeEmpty(), "the token controller fills in the gate's token")
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())

	containers, _, _ := unstructured.NestedSlice(rollout.Object, "spec", "template", "spec", "containers")
	app := containers[0].(map[string]any)
	if *exampleImage != "" {
		app["image"] = *exampleImage
	}
	env, _ := app["env"].([]any)
	app["env"] = append(env, map[string]any{"name": "CONTROL_ADDR", "value": ":8080"})
	Expect(unstructured.SetNestedSlice(rollout.Object, containers, "spec", "template", "spec", "containers")).To(Succeed())
	apply(ctx, rollout)
	Eventually(func(g Gomega) {
		r := rolloutNow(g, ctx)
		g.Expect(nested(r, "status", "phase")).To(Equal("Healthy"), "%v", nested(r, "status", "message"))
		g.Expect(pods(ctx, rolloutsNamespace, appLabels(rolloutName))).To(HaveLen(2))
	}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
	// The stable revision's pods report before any canary is judged against them.
	Eventually(func(g Gomega) {
		cb := gatedBreaker(ctx)
		g.Expect(cb.Status.Revisions).To(ConsistOf(And(HaveField("Revision", stableHash(ctx)), HaveField("Pods", BeEquivalentTo(2)))))
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
}

// useGateAddress points the AnalysisTemplate's gate argument at the gate Service's
// cluster IP: the Service's DNS name resolves nowhere on this node.
func useGateAddress(ctx context.Context, template *unstructured.Unstructured) {
	GinkgoHelper()
	var svc corev1.Service
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: gateService}, &svc)).To(Succeed())
	args, _, _ := unstructured.NestedSlice(template.Object, "spec", "args")
	found := false
	for _, a := range args {
		if m := a.(map[string]any); m["name"] == "gate" {
			m["value"] = fmt.Sprintf("https://%s:%d", svc.Spec.ClusterIP, svc.Spec.Ports[0].Port)
			found = true
		}
	}
	Expect(found).To(BeTrue(), "the AnalysisTemplate has a gate argument")
	Expect(unstructured.SetNestedSlice(template.Object, args, "spec", "args")).To(Succeed())
}

func rolloutNow(g Gomega, ctx context.Context) *unstructured.Unstructured {
	r := newArgo(rolloutGVK)
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: rolloutsNamespace, Name: rolloutName}, r)).To(Succeed())
	return r
}

func nested(u *unstructured.Unstructured, path ...string) any {
	v, _, _ := unstructured.NestedFieldNoCopy(u.Object, path...)
	return v
}

func stableHash(ctx context.Context) string {
	GinkgoHelper()
	var hash string
	Eventually(func(g Gomega) {
		hash, _ = nested(rolloutNow(g, ctx), "status", "stableRS").(string)
		g.Expect(hash).NotTo(BeEmpty())
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	return hash
}

// changeTemplate sets environment variables of the Rollout's pod template, which makes a
// new revision, and returns its pod-template hash once Argo Rollouts has computed it.
func changeTemplate(ctx context.Context, vars map[string]string) string {
	GinkgoHelper()
	var before string
	Eventually(func(g Gomega) {
		r := rolloutNow(g, ctx)
		before, _ = nested(r, "status", "currentPodHash").(string)
		containers, _, _ := unstructured.NestedSlice(r.Object, "spec", "template", "spec", "containers")
		app := containers[0].(map[string]any)
		env, _ := app["env"].([]any)
		for name, value := range vars {
			set := false
			for _, e := range env {
				if m := e.(map[string]any); m["name"] == name {
					m["value"], set = value, true
				}
			}
			if !set {
				env = append(env, map[string]any{"name": name, "value": value})
			}
		}
		app["env"] = env
		g.Expect(unstructured.SetNestedSlice(r.Object, containers, "spec", "template", "spec", "containers")).To(Succeed())
		g.Expect(k8s.Update(ctx, r)).To(Succeed())
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	var hash string
	Eventually(func(g Gomega) {
		hash, _ = nested(rolloutNow(g, ctx), "status", "currentPodHash").(string)
		g.Expect(hash).NotTo(BeEmpty())
		g.Expect(hash).NotTo(Equal(before), "a new revision")
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	return hash
}

// waitAnalysisRun waits for the AnalysisRun of the canary revision hash to end in phase,
// and returns it.
func waitAnalysisRun(ctx context.Context, hash, phase string) *unstructured.Unstructured {
	GinkgoHelper()
	var found *unstructured.Unstructured
	Eventually(func(g Gomega) {
		list := &unstructured.UnstructuredList{}
		list.SetAPIVersion(analysisRunGVK.Group + "/" + analysisRunGVK.Version)
		list.SetKind(analysisRunGVK.Kind + "List")
		g.Expect(k8s.List(ctx, list, client.InNamespace(rolloutsNamespace), client.MatchingLabels{"rollouts-pod-template-hash": hash})).To(Succeed())
		g.Expect(list.Items).NotTo(BeEmpty(), "no AnalysisRun of revision %s yet", hash)
		run := &list.Items[len(list.Items)-1]
		got, _ := nested(run, "status", "phase").(string)
		g.Expect(got).To(Equal(phase), "AnalysisRun %s: %v %v", run.GetName(), nested(run, "status", "message"), measurementValues(run))
		found = run
	}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
	return found
}

// measurementValues are the values the gate's metric measured, in order: the gate's
// phases.
func measurementValues(run *unstructured.Unstructured) []string {
	results, _, _ := unstructured.NestedSlice(run.Object, "status", "metricResults")
	var out []string
	for _, r := range results {
		ms, _ := r.(map[string]any)["measurements"].([]any)
		for _, m := range ms {
			// The web provider keeps what jsonPath selected as JSON: a quoted string.
			v, _ := m.(map[string]any)["value"].(string)
			if unquoted, err := strconv.Unquote(v); err == nil {
				v = unquoted
			}
			out = append(out, v)
		}
	}
	return out
}

// readyPods waits until the Rollout's replicas are all pods of revision hash, Ready,
// with addresses (after an abort the stable ReplicaSet scales back up), and returns them.
func readyPods(ctx context.Context, hash string) []corev1.Pod {
	GinkgoHelper()
	var ready []corev1.Pod
	Eventually(func(g Gomega) {
		ready = ready[:0]
		all := pods(ctx, rolloutsNamespace, appLabels(rolloutName))
		for _, p := range all {
			g.Expect(p.Labels).To(HaveKeyWithValue("rollouts-pod-template-hash", hash), "pod %s of another revision", p.Name)
			g.Expect(p.Status.PodIP).NotTo(BeEmpty(), "pod %s has no IP yet", p.Name)
			g.Expect(p.Status.Conditions).To(ContainElement(And(HaveField("Type", corev1.PodReady), HaveField("Status", corev1.ConditionTrue))), "pod %s Ready", p.Name)
			ready = append(ready, p)
		}
		g.Expect(ready).To(HaveLen(2))
	}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
	return ready
}

// gatedBreaker is the example's breaker in the Rollout's namespace, the one the gate judges.
func gatedBreaker(ctx context.Context) *resiliencev1alpha1.CircuitBreaker {
	GinkgoHelper()
	var cb resiliencev1alpha1.CircuitBreaker
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: rolloutsNamespace, Name: exampleBreaker}, &cb)).To(Succeed())
	return &cb
}
