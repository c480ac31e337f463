// Command fuseboxd is the per-pod decision sidecar (docs/design.md §8): it runs the pod's
// breakers with pkg/breaker/kube, as a Go application would, and serves them to programs
// in any language over a Unix socket.
//
// In a pod it reads the cluster as kube.FromEnvironment does (POD_NAME, POD_NAMESPACE,
// POD_UID from the downward API) and writes the pod's BreakerReport, or, with
// FUSEBOX_NODE_AGENT set, streams its config from its node's agent and reports there.
// With --config-dir it needs no API server: it reads the rendered config from
// DIR/<name>.json, laid out as the mounted fusebox-breakers ConfigMap, hot-reloads it,
// and reports nowhere.
//
// With --node it is that node agent instead (docs/design.md §9, internal/nodeagent): one
// per node, serving every pod of its node on --node-listen.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/fusebox-dev/fusebox/internal/fuseboxd"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/kube"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "fuseboxd:", strings.TrimPrefix(err.Error(), "fuseboxd: "))
		os.Exit(1)
	}
}

func run() error {
	var (
		socket     = flag.String("socket", "/var/run/fusebox/fusebox.sock", "Unix socket to serve the API on")
		listen     = flag.String("listen", "", "also serve on this loopback address (127.0.0.1:PORT); no other address is accepted")
		configDir  = flag.String("config-dir", "", "read the breaker config from DIR/<name>.json (the ConfigMap's layout) instead of the cluster, and report nowhere")
		kubeconfig = flag.String("kubeconfig", "", "outside a pod: reach the cluster with this kubeconfig, speaking for the pod that POD_NAME, POD_NAMESPACE and POD_UID name (with --node: as the node's agent)")
		grace      = flag.Duration("shutdown-grace", 5*time.Second, "how long requests in progress and the last report write (with --node: the node's) may take at shutdown")
		debug      = flag.Bool("debug", false, "log at debug level")
		probeOnly  = flag.Bool("probe", false, "do not serve: check that a daemon serves on --socket (GET /healthz) and exit 0 if it does, 1 if not (the injected sidecar's startup probe)")
		node       = flag.Bool("node", false, "run as the node agent (DaemonSet fusebox-node): carry the reports and config of every pod of the node NODE_NAME names")
		nodeListen = flag.String("node-listen", fmt.Sprintf(":%d", breakerconfig.NodeAgentPort), "with --node: the address to serve the node's pods on")
	)
	var lim limits
	lim.register(flag.CommandLine)
	flag.Parse()
	if *probeOnly {
		return probe(*socket)
	}
	if err := lim.check(); err != nil {
		return err
	}
	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	slog.SetDefault(log)
	if *node {
		return runNode(*nodeListen, *kubeconfig, *grace, log)
	}

	// The socket first: a path another daemon serves is refused before anything starts,
	// with that line alone.
	lns, err := listeners(*socket, *listen)
	if err != nil {
		return err
	}
	defer func() {
		for _, l := range lns {
			_ = l.Close() // the socket's removes it; done already by Shutdown
		}
	}()

	var o kube.Options
	switch {
	case *configDir != "":
		o = kube.Options{ConfigDir: *configDir}
	case *kubeconfig != "":
		cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
		if err != nil {
			return err
		}
		o = kube.Options{Config: cfg, Pod: os.Getenv(kube.EnvPodName), Namespace: os.Getenv(kube.EnvNamespace), PodUID: os.Getenv(kube.EnvPodUID)}
	default:
		var err error
		if o, err = kube.OptionsFromEnvironment(); err != nil {
			return err
		}
	}
	o.Logger = log

	// The agent outlives the server: permits settled at shutdown still reach the report.
	agentCtx, stopAgent := context.WithCancel(context.Background())
	defer stopAgent()
	agent, err := kube.StartAgent(agentCtx, o)
	if err != nil {
		return err
	}
	srv, err := fuseboxd.New(lim.apply(fuseboxd.Options{
		Registry:  agent.Registry(),
		Published: agent.Published,
		Ready:     agent.Loaded,
		Logger:    log,
	}))
	if err != nil {
		return err
	}

	errc := make(chan error, len(lns))
	for _, l := range lns {
		log.Info("Serving the breaker API", "address", l.Addr().String())
		go func() { errc <- srv.Serve(l) }()
	}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	var serveErr error
	select {
	case s := <-sigs:
		log.Info("Shutting down", "signal", s.String())
	case serveErr = <-errc:
		log.Error("Serving failed; shutting down", "error", serveErr)
	}

	ctx, cancel := context.WithTimeout(context.Background(), *grace)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		log.Warn("Requests still in progress at shutdown", "error", err)
	}
	// Leave the report consistent: wait (within the grace period) for the transitions the
	// last settles caused to be written.
	for !agent.ReportWritten() && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
	stopAgent()
	select {
	case <-agent.Done():
	case <-ctx.Done():
	}
	if serveErr != nil && !errors.Is(serveErr, net.ErrClosed) {
		return serveErr
	}
	return nil
}
