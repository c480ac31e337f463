// Command manager runs the Fusebox operator: it reconciles CircuitBreakers into
// the fusebox-breakers ConfigMap of their namespace and reports on their status.
package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"strings"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/controller"
	"github.com/fusebox-dev/fusebox/internal/gateserver"
	fuseboxwebhook "github.com/fusebox-dev/fusebox/pkg/webhook"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		metricsAddr   string
		metricsSecure bool
		probeAddr     string
		pprofAddr     string
		leaderElect   bool
		leaderElectNS string
		namespaces    string
		qps           float64
		burst         int
		operatorNS    string
		agentGrace    time.Duration
	)
	_, inCluster := os.LookupEnv("KUBERNETES_SERVICE_HOST")
	listen := listenDefaults(inCluster)
	flag.StringVar(&metricsAddr, "metrics-bind-address", "", "Address the metrics endpoint binds to (default \""+listen.host+":8443\" with --metrics-secure, \""+listen.host+":8080\" without: every interface in a pod, loopback only elsewhere); \"0\" disables it.")
	flag.BoolVar(&metricsSecure, "metrics-secure", true, "Serve metrics over HTTPS, to clients the API server authenticates (TokenReview) and authorizes (SubjectAccessReview) for GET /metrics; false serves plain HTTP to anyone, for local runs.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", listen.probes, "Address the /healthz and /readyz endpoints bind to (every interface in a pod, loopback only elsewhere).")
	flag.StringVar(&pprofAddr, "pprof-bind-address", "0", "Address Go's /debug/pprof endpoints bind to, unauthenticated, for profiling (e.g. 127.0.0.1:6060); \"0\" disables them.")
	flag.BoolVar(&leaderElect, "leader-elect", inCluster, "Elect a leader so only one replica reconciles (default: on when running in a cluster).")
	flag.StringVar(&leaderElectNS, "leader-election-namespace", "", "Namespace of the leader election Lease (default: the pod's namespace).")
	flag.StringVar(&namespaces, "namespaces", "", "Comma-separated namespaces to watch (default: all).")
	flag.Float64Var(&qps, "kube-api-qps", controller.DefaultQPS, "Requests per second the manager may send the API server.")
	flag.IntVar(&burst, "kube-api-burst", controller.DefaultBurst, "Requests the manager may send the API server in a burst.")
	flag.StringVar(&operatorNS, "operator-namespace", envOr("POD_NAMESPACE", controller.DefaultOperatorNamespace), "Namespace the operator and its node agents (DaemonSet fusebox-node) run in (default: $POD_NAMESPACE, else "+controller.DefaultOperatorNamespace+").")
	flag.DurationVar(&agentGrace, "node-agent-grace", controller.DefaultNodeAgentGrace, "How long a node's NodeBreakerReports keep counting after its node agent stopped being Ready.")
	webhookOpts := fuseboxwebhook.DefaultOptions()
	webhookOpts.Host = listen.webhooks
	webhookOpts.BindFlags(flag.CommandLine)
	gateOpts := gateserver.DefaultOptions()
	gateOpts.BindAddress = listen.gate
	gateOpts.BindFlags(flag.CommandLine)
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()

	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("setup")
	setMemoryLimit(log)

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(resiliencev1alpha1.AddToScheme(scheme))

	cfg, err := restConfig(inCluster)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = float32(qps), burst
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metricsServerOptions(listen.metrics(metricsAddr, metricsSecure), metricsSecure),
		HealthProbeBindAddress:        probeAddr,
		PprofBindAddress:              pprofAddr,
		LeaderElection:                leaderElect,
		LeaderElectionID:              "fusebox-manager.fusebox.dev",
		LeaderElectionNamespace:       leaderElectNS,
		LeaderElectionReleaseOnCancel: true,
		Cache:                         cacheOptions(namespaces, operatorNS),
		WebhookServer:                 webhookOpts.NewServer(),
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}

	reconciler := controller.NewReconciler(mgr, controller.NewMetrics(metrics.Registry))
	reconciler.OperatorNamespace, reconciler.NodeAgentGrace = operatorNS, agentGrace
	if err := reconciler.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up CircuitBreaker controller: %w", err)
	}
	if err := fuseboxwebhook.Setup(mgr, webhookOpts); err != nil {
		return fmt.Errorf("set up webhooks: %w", err)
	}
	if err := addGate(mgr, gateOpts); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("add health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return fmt.Errorf("add ready check: %w", err)
	}

	log.Info("Starting manager", "namespaces", namespaces, "leaderElection", leaderElect, "host", hostOf(cfg))
	// SetupSignalHandler cancels on SIGTERM or SIGINT; Start then stops the
	// controllers, waits for in-flight reconciles and releases the lease.
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		return fmt.Errorf("run manager: %w", err)
	}
	return nil
}

// metricsServerOptions is the metrics endpoint as kubebuilder scaffolds it:
// with secure set, HTTPS (a self-signed certificate the server makes at start)
// and every request authenticated and authorized by the API server, so a
// scraper needs a token whose identity may GET /metrics (the metrics-reader
// ClusterRole); without it, plain HTTP. HTTP/2 is refused: its stream handling
// has had denial-of-service bugs (CVE-2023-44487, CVE-2023-39325) and a
// metrics scrape gains nothing from it.
func metricsServerOptions(addr string, secure bool) metricsserver.Options {
	if addr == "" {
		addr = ":8080"
		if secure {
			addr = ":8443"
		}
	}
	opts := metricsserver.Options{BindAddress: addr, SecureServing: secure}
	if secure {
		opts.FilterProvider = filters.WithAuthenticationAndAuthorization
		opts.TLSOpts = []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }}
	}
	return opts
}

// addGate serves the rollout gate (docs/rollouts.md) from every replica, reading the
// manager's cache.
func addGate(mgr ctrl.Manager, opts gateserver.Options) error {
	if !opts.Enabled() {
		return nil
	}
	gate, err := gateserver.New(mgr.GetConfig(), mgr.GetHTTPClient(), mgr.GetClient(), opts)
	if err != nil {
		return fmt.Errorf("set up the rollout gate: %w", err)
	}
	if err := mgr.Add(gate); err != nil {
		return fmt.Errorf("set up the rollout gate: %w", err)
	}
	return nil
}

// cacheOptions restricts the cache to the watched namespaces, and to what the
// reconciler needs of each kind. Pods are also watched in the operator's namespace,
// where the node agents run, whose readiness decides whether their nodes' reports count.
func cacheOptions(namespaces, operatorNamespace string) cache.Options {
	opts := cache.Options{ByObject: controller.CacheByObject()}
	for _, ns := range strings.Split(namespaces, ",") {
		if ns = strings.TrimSpace(ns); ns != "" {
			if opts.DefaultNamespaces == nil {
				opts.DefaultNamespaces = map[string]cache.Config{}
			}
			opts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	if opts.DefaultNamespaces == nil || operatorNamespace == "" {
		return opts
	}
	// ByObject is keyed by the objects CacheByObject made: find its Pod.
	for obj, by := range opts.ByObject {
		if _, ok := obj.(*corev1.Pod); ok {
			by.Namespaces = maps.Clone(opts.DefaultNamespaces)
			by.Namespaces[operatorNamespace] = cache.Config{}
			opts.ByObject[obj] = by
		}
	}
	return opts
}

// envOr is the environment variable's value, or def when it is unset or empty.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func hostOf(cfg *rest.Config) string { return cfg.Host }

// listening is where the manager listens unless its flags say otherwise.
type listening struct {
	host     string // of the metrics endpoint
	probes   string
	webhooks string // the webhook server's host
	gate     string // the rollout gate's address
}

// listenDefaults: in a pod, every interface, for the kubelet's probes, the Service of
// the webhooks and a scraper; anywhere else (make run, a laptop against a remote
// cluster), loopback only: nothing there is for other machines, and the webhooks and
// metrics of a local run answer without authentication.
func listenDefaults(inCluster bool) listening {
	if inCluster {
		return listening{probes: ":8081", gate: gateserver.DefaultBindAddress}
	}
	return listening{host: "127.0.0.1", probes: "127.0.0.1:8081", webhooks: "127.0.0.1", gate: "127.0.0.1" + gateserver.DefaultBindAddress}
}

// metrics is the metrics endpoint's address: addr if the flag set one, else port 8443
// with secure serving and 8080 without, on l's host.
func (l listening) metrics(addr string, secure bool) string {
	switch {
	case addr != "":
		return addr
	case secure:
		return l.host + ":8443"
	}
	return l.host + ":8080"
}

// restConfig reaches the API server as controller-runtime's GetConfig would (--kubeconfig,
// then KUBECONFIG, then the pod's service account, then ~/.kube/config), but says in one
// line what to do when there is nothing to reach, instead of a stack trace of each attempt.
func restConfig(inCluster bool) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if f := flag.Lookup("kubeconfig"); f != nil {
		rules.ExplicitPath = f.Value.String()
	}
	if inCluster && rules.ExplicitPath == "" && os.Getenv(clientcmd.RecommendedConfigPathEnvVar) == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("in-cluster config: %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	switch {
	case clientcmd.IsEmptyConfig(err):
		return nil, errors.New("no cluster to run against: no --kubeconfig, no KUBECONFIG, no ~/.kube/config, and not in a pod; " +
			"point KUBECONFIG at your cluster's kubeconfig, or run `make run` without USE_EXISTING_CLUSTER for a local control plane")
	case err != nil:
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	return cfg, nil
}

// memoryLimitRatio is the share of the container's memory limit the Go runtime keeps its
// heap under (GOMEMLIMIT), leaving the rest for what it does not count (stacks, the
// binary, memory freed but not yet returned). The operator's cache holds a trimmed copy
// of every pod of the cluster, about 2 KiB each (docs/benchmarks.md, "Node agents"): with
// the runtime's default of collecting when the heap has doubled, a limit sized for the
// cache would be reached between two collections; under a soft limit the runtime collects
// sooner instead.
const memoryLimitRatio = 0.9

// setMemoryLimit sets the Go runtime's soft memory limit to memoryLimitRatio of the
// memory limit of the manager's cgroup (the container's resources.limits.memory), unless
// GOMEMLIMIT sets one (AUTOMEMLIMIT=off leaves the runtime's default) or the cgroup has
// no limit. The setting is logged; a limit that cannot be read is logged and left unset.
func setMemoryLimit(log logr.Logger) {
	if _, err := memlimit.Set(
		memlimit.WithRatio(memoryLimitRatio),
		memlimit.WithProvider(memlimit.FromCgroup),
		memlimit.WithLogger(slog.New(logr.ToSlogHandler(log))),
	); err != nil {
		log.Info("The Go runtime's memory limit is left unset", "reason", err.Error())
	}
}
