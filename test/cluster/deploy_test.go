package cluster

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The namespace of the pod the kustomize install's sidecar spec runs: not the sidecar
// spec's, which may still be on its way out.
const deployedSidecarNamespace = "fusebox-deployed-sidecar"

// makeTarget runs `make TARGET VAR=...` in the repository, as a user would, with this
// process's environment less GOWORK: the Makefile decides where the workspace is off,
// and the suite runs with GOWORK=off (run.sh).
func makeTarget(ctx context.Context, target string, vars ...string) {
	GinkgoHelper()
	makeBin, err := exec.LookPath("make")
	if err != nil {
		unavailable("no make on PATH: %v", err)
	}
	cmd := exec.CommandContext(ctx, makeBin, append([]string{"-C", *repoRoot, target}, vars...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOWORK=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.CombinedOutput()
	GinkgoWriter.Printf("make %s:\n%s\n", target, out)
	Expect(err).NotTo(HaveOccurred(), "make %s:\n%s", target, out)
}

// configDigest is a digest of every file under config/, to tell whether make changed it.
func configDigest() string {
	GinkgoHelper()
	h := sha256.New()
	root := filepath.Join(*repoRoot, "config")
	Expect(filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", path, len(data))
		_, err = h.Write(data)
		return err
	})).To(Succeed())
	return fmt.Sprintf("%x", h.Sum(nil))
}

// deploySpecs: the other install of the README, `make deploy` (kustomize, config/default),
// with both images the node has: the manager's and fuseboxd's, which the node agent runs
// and the pod webhook injects. Issue 35: the kustomize path could not set the sidecar's
// image, so an annotated pod waited for ghcr.io/fusebox-dev/fuseboxd:latest, never
// published, with pull policy Always; and make deploy left config/ modified. Run after
// `helm uninstall` (upgradeSpecs), which leaves the CRDs and the example running.
func deploySpecs() {
	It("deploys with make deploy, both images set, config/ untouched, and an annotated pod's sidecar starts", func(ctx SpecContext) {
		needKubectl()
		img := need("FUSEBOX_IMAGE (-image)", *image)
		sidecarImage := need("FUSEBOXD_IMAGE (-fuseboxd-image)", *fuseboxdImage)
		worker := need("WORKER_IMAGE (-worker-image)", *workerImage)

		before := configDigest()
		start := time.Now()
		makeTarget(ctx, "deploy", "IMG="+img, "FUSEBOXD_IMG="+sidecarImage)
		Expect(configDigest()).To(Equal(before), "make deploy changed config/")
		managers := waitManagers(ctx, 1, img, 4*time.Minute)
		record("make deploy → manager Ready", time.Since(start), "kustomize, config/default")
		Expect(managers[0].Spec.Containers[0].Args).To(ContainElement("--fuseboxd-image="+sidecarImage), "the sidecar's image, from FUSEBOXD_IMG")

		// The node agent runs the same image, pulled from nowhere: it is on the node.
		Eventually(func(g Gomega) {
			var ds appsv1.DaemonSet
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: "fusebox-node"}, &ds)).To(Succeed())
			g.Expect(ds.Spec.Template.Spec.Containers[0].Image).To(Equal(sidecarImage))
			g.Expect(ds.Status.DesiredNumberScheduled).To(BeNumerically(">", 0))
			g.Expect(ds.Status.NumberReady).To(Equal(ds.Status.DesiredNumberScheduled), "node agent pods Ready")
		}).WithContext(ctx).WithTimeout(3*time.Minute).WithPolling(500*time.Millisecond).Should(Succeed(), "the node agent DaemonSet")

		// A fresh pod annotated for the sidecar, in a namespace of its own, once the
		// webhooks answer (they fail closed: until then the CircuitBreaker is refused).
		manifests := decodeManifests([]byte(strings.ReplaceAll(sidecarManifests, sidecarNamespace, deployedSidecarNamespace)), "the sidecar's manifests")
		Eventually(func() error {
			for _, u := range manifests {
				if err := k8s.Apply(ctx, client.ApplyConfigurationFromUnstructured(u.DeepCopy()), client.FieldOwner("kubectl"), client.ForceOwnership); err != nil {
					return fmt.Errorf("apply %s %s: %w", u.GetKind(), u.GetName(), err)
				}
			}
			return nil
		}).WithContext(ctx).WithTimeout(2*time.Minute).WithPolling(500*time.Millisecond).Should(Succeed(), "the webhooks do not answer through their Service")
		DeferCleanup(func(ctx SpecContext) {
			Expect(client.IgnoreNotFound(k8s.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: deployedSidecarNamespace}}))).To(Succeed())
		})
		p := workerPod(worker)
		p.Namespace = deployedSidecarNamespace
		start = time.Now()
		Expect(k8s.Create(ctx, p)).To(Succeed())
		Expect(p.Spec.InitContainers).NotTo(BeEmpty(), "no sidecar was injected")
		sc := p.Spec.InitContainers[0]
		Expect(sc.Name).To(Equal(sidecarContainer))
		Expect(sc.Image).To(Equal(sidecarImage), "FUSEBOXD_IMG, through the manager's --fuseboxd-image")
		Expect(sc.ImagePullPolicy).To(Equal(corev1.PullIfNotPresent), "a pull policy that uses the image the node has")
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
			g.Expect(running(p)).To(BeTrue(), "pod %s: %s %+v %+v", p.Name, p.Status.Phase, p.Status.InitContainerStatuses, p.Status.ContainerStatuses)
			g.Expect(p.Status.InitContainerStatuses).To(ContainElement(And(
				HaveField("Name", sidecarContainer), HaveField("State.Running", Not(BeNil())),
				HaveField("Started", HaveValue(BeTrue())))), "the sidecar, its startup probe passed: %+v", p.Status.InitContainerStatuses)
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
		record("make deploy: annotated pod created → sidecar and worker Running", time.Since(start), "images loaded, not pulled")

		// make undeploy removes what make deploy applied, the CRDs included.
		Expect(k8s.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: deployedSidecarNamespace}})).To(Succeed())
		makeTarget(ctx, "undeploy")
		Expect(configDigest()).To(Equal(before), "make undeploy changed config/")
		Eventually(func(g Gomega) {
			var list corev1.PodList
			g.Expect(k8s.List(ctx, &list, client.InNamespace(operatorNamespace), managerLabels)).To(Succeed())
			g.Expect(list.Items).To(BeEmpty())
		}).WithContext(ctx).WithTimeout(2*time.Minute).Should(Succeed(), "manager pods after make undeploy")
	}, SpecTimeout(10*time.Minute))
}
