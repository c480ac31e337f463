package cluster

import (
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/release"
	"k8s.io/cli-runtime/pkg/genericclioptions"
)

// What README's install section names.
const (
	releaseName       = "fusebox"
	operatorNamespace = "fusebox-system"
)

// helmConfig is what `helm --namespace fusebox-system` runs with: the KUBECONFIG's
// cluster, releases stored as Secrets, and a discovery cache of the spec's own (Helm's
// default is under ~/.kube on the host).
func helmConfig() *action.Configuration {
	GinkgoHelper()
	cache := GinkgoT().TempDir()
	kubeconfig, namespace := os.Getenv("KUBECONFIG"), operatorNamespace
	flags := &genericclioptions.ConfigFlags{KubeConfig: &kubeconfig, Namespace: &namespace, CacheDir: &cache}
	cfg := &action.Configuration{}
	Expect(cfg.Init(flags, namespace, "secret", func(format string, v ...any) {
		GinkgoWriter.Printf("helm: "+format+"\n", v...)
	})).To(Succeed())
	return cfg
}

func loadChart() *chart.Chart {
	GinkgoHelper()
	chrt, err := loader.Load(filepath.Join(*repoRoot, "dist", "chart"))
	Expect(err).NotTo(HaveOccurred(), "load dist/chart")
	return chrt
}

// imageValues is `--set image.repository=... --set image.tag=...` for ref, with the pull
// policy the chart defaults to: the node has the image already (hack/cluster.sh load),
// and IfNotPresent never asks a registry for it. With -fuseboxd-image, the sidecar's
// image too (fuseboxd.image), which the node has as well.
func imageValues(ref string) map[string]any {
	repository, tag := splitImage(ref)
	values := map[string]any{"image": map[string]any{"repository": repository, "tag": tag, "pullPolicy": "IfNotPresent"}}
	if *fuseboxdImage != "" {
		repository, tag := splitImage(*fuseboxdImage)
		values["fuseboxd"] = map[string]any{"image": map[string]any{"repository": repository, "tag": tag}}
	}
	return values
}

// helmInstall is `helm install fusebox dist/chart --namespace fusebox-system
// --create-namespace --set ...`, which returns once the objects are created.
func helmInstall(values map[string]any) *release.Release {
	GinkgoHelper()
	install := action.NewInstall(helmConfig())
	install.ReleaseName, install.Namespace, install.CreateNamespace = releaseName, operatorNamespace, true
	install.Timeout = 2 * time.Minute
	rel, err := install.Run(loadChart(), values)
	Expect(err).NotTo(HaveOccurred(), "helm install")
	return rel
}

// helmUpgrade is `helm upgrade fusebox dist/chart --reuse-values --set ...`.
func helmUpgrade(values map[string]any) {
	GinkgoHelper()
	upgrade := action.NewUpgrade(helmConfig())
	upgrade.Namespace, upgrade.ReuseValues = operatorNamespace, true
	upgrade.Timeout = 2 * time.Minute
	rel, err := upgrade.Run(releaseName, loadChart(), values)
	Expect(err).NotTo(HaveOccurred(), "helm upgrade")
	Expect(rel.Info.Status).To(Equal(release.StatusDeployed))
}

// helmUninstall is `helm uninstall fusebox --namespace fusebox-system`.
func helmUninstall() {
	GinkgoHelper()
	uninstall := action.NewUninstall(helmConfig())
	uninstall.Timeout = 2 * time.Minute
	_, err := uninstall.Run(releaseName)
	Expect(err).NotTo(HaveOccurred(), "helm uninstall")
}
