// Package cluster is the end-to-end suite on a real cluster of one or two nodes
// (hack/cluster.sh): Fusebox installed from dist/chart with the image just built, the
// example application running as real pods with real bound tokens, the kubelets, the
// garbage collector and leader election doing their own parts, and pods on each node
// reaching the other's. `make test-cluster` starts the cluster, builds and loads the
// images, runs this suite inside the first node's network namespace and stops the
// cluster; docs/testing.md says what each spec proves.
package cluster

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// What the run is given. make test-cluster sets every one; run by hand, the suite says
// which is missing.
var (
	repoRoot      = flag.String("root", envOr("FUSEBOX_ROOT", "../.."), "The repository root (dist/chart, examples/in-cluster).")
	image         = flag.String("image", os.Getenv("FUSEBOX_IMAGE"), "The manager image `make image` built and hack/cluster.sh loaded (repository:tag).")
	rebuiltImage  = flag.String("rebuilt-image", os.Getenv("FUSEBOX_REBUILT_IMAGE"), "A rebuild of the manager image under another tag, for `helm upgrade`.")
	exampleImage  = flag.String("example-image", os.Getenv("FUSEBOX_EXAMPLE_IMAGE"), "The example application's image, when not the one examples/in-cluster/deploy/app.yaml names.")
	fuseboxdImage = flag.String("fuseboxd-image", os.Getenv("FUSEBOXD_IMAGE"), "The fuseboxd sidecar image `make image-fuseboxd` built and hack/cluster.sh loaded; the chart is installed with it.")
	workerImage   = flag.String("worker-image", os.Getenv("WORKER_IMAGE"), "The image of hack/fuseboxd-worker, the client of the sidecar's socket, built by hack/image and loaded.")
	rolloutsDir   = flag.String("rollouts", os.Getenv("ROLLOUTS_DIR"), "The Argo Rollouts build hack/rollouts.sh prints: rollouts-controller, crds/, clusterrole.yaml.")
	netcheckImage = flag.String("netcheck-image", os.Getenv("NETCHECK_IMAGE"), "The image of hack/cluster/netcheck, a pod's view of the network between the nodes, built by hack/image and loaded.")
	nodeCount     = flag.Int("nodes", 0, "How many nodes `hack/cluster.sh up --nodes` started (0: not given); the host spec checks that it looked at every node's namespaces.")
	kubectlBin    = flag.String("kubectl", envOr("KUBECTL", "kubectl"), "The kubectl binary.")
	pluginBin     = flag.String("plugin", os.Getenv("KUBECTL_FUSEBOX"), "The kubectl-fusebox binary (make plugin), for the specs of `kubectl fusebox`.")
	timingsOut    = flag.String("timings", os.Getenv("CLUSTER_TIMINGS"), "Append the measured timings to this file (markdown table rows).")
	hostBaseline  = flag.String("host-baseline", os.Getenv("CLUSTER_HOST_BASELINE"), "The host snapshot taken before `hack/cluster.sh up`: the spec labelled host compares the host with it.")
	hostSnapshot  = flag.String("host-snapshot", "", "Write a snapshot of the host to this file and exit (before `hack/cluster.sh up`).")
	clusterState  = flag.String("cluster-state", os.Getenv("CLUSTER_STATE_DIR"), "The cluster's state directory: files under it are the cluster's own.")
)

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// The clients every spec uses, as the cluster's admin.
var (
	adminConfig *rest.Config
	k8s         client.Client
	clientset   *kubernetes.Clientset
	scheme      = runtime.NewScheme()
)

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(resiliencev1alpha1.AddToScheme(scheme))
}

func TestMain(m *testing.M) {
	flag.Parse()
	if *hostSnapshot != "" {
		if err := writeHostSnapshot(*hostSnapshot); err != nil {
			fmt.Fprintln(os.Stderr, "host snapshot:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestCluster(t *testing.T) {
	RegisterFailHandler(Fail)
	// The machines that run this suite are shared and loaded: an Eventually without a
	// timeout of its own waits a minute, not Gomega's 1 s, and returns as soon as it holds.
	SetDefaultEventuallyTimeout(time.Minute)
	RunSpecs(t, "Fusebox on a real cluster")
}

// unavailable fails the run under CI and skips otherwise, saying why: a step that
// cannot run here never passes silently.
func unavailable(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") != "" {
		Fail("cannot run under CI: " + msg)
	}
	Skip("SKIPPED: " + msg)
}

// connect builds the admin clients once, from KUBECONFIG (hack/cluster.sh exec sets it).
func connect() {
	if k8s != nil {
		return
	}
	path := os.Getenv("KUBECONFIG")
	if path == "" {
		unavailable("KUBECONFIG is not set: run the suite with `make test-cluster`, or inside `hack/cluster.sh exec --`")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	Expect(err).NotTo(HaveOccurred(), "read KUBECONFIG %s", path)
	cfg.QPS, cfg.Burst = 50, 100
	cs, err := kubernetes.NewForConfig(cfg)
	Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
		unavailable("the cluster of KUBECONFIG %s does not answer (%v): start it with `hack/cluster.sh up` and run the suite inside `hack/cluster.sh exec --`", path, err)
	}
	cl, err := client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	adminConfig, clientset, k8s = cfg, cs, cl
}

// need fails the spec when a value the run should have been given is missing.
func need(name, value string) string {
	if value == "" {
		unavailable("%s is not set (make test-cluster sets it)", name)
	}
	return value
}

// splitImage splits repository:tag (a registry port is part of the repository).
func splitImage(ref string) (repository, tag string) {
	i := strings.LastIndex(ref, ":")
	if i < 0 || strings.Contains(ref[i:], "/") {
		return ref, "latest"
	}
	return ref[:i], ref[i+1:]
}
