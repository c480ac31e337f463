package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/fusebox-dev/fusebox/internal/nodeagent"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// nodeConfig is what `fuseboxd node` runs with.
type nodeConfig struct {
	listen, metrics, kubeconfig string
	grace                       time.Duration
	debug                       bool
}

func (c *nodeConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&c.listen, "listen", fmt.Sprintf(":%d", breakerconfig.NodeAgentPort), "the address to serve the node's pods on")
	fs.StringVar(&c.metrics, "metrics-bind-address", "0", `the address to serve the agent's Prometheus metrics on ("0": none)`)
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "outside a pod: reach the cluster with this kubeconfig, as the node's agent")
	fs.DurationVar(&c.grace, "shutdown-grace", 5*time.Second, "how long requests in progress and the last writes of the node's reports may take at shutdown")
	fs.BoolVar(&c.debug, "debug", false, "log at debug level")
}

// runNode is `fuseboxd node`.
func runNode(args []string) error {
	var c nodeConfig
	parse("node", args, c.register)
	return node(c)
}

// node runs the node agent until SIGTERM or SIGINT: NODE_NAME names its node, and it
// reaches the API server in-cluster (or through kubeconfig, outside a pod). On the signal
// it stops serving and, within the grace period, writes the reports it still holds. With
// metrics other than "0" it serves its Prometheus metrics there.
func node(c nodeConfig) error {
	log := newLogger(c.debug)
	name := os.Getenv(breakerconfig.EnvNodeName)
	if name == "" {
		return fmt.Errorf("node: %s is not set: give the agent its node with the downward API (fieldRef spec.nodeName)", breakerconfig.EnvNodeName)
	}
	var (
		cfg *rest.Config
		err error
	)
	if c.kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	agent, err := nodeagent.New(nodeagent.Options{Config: cfg, NodeName: name, Logger: log, ShutdownGrace: c.grace})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return fmt.Errorf("node --listen: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if c.metrics != "0" && c.metrics != "" {
		mln, err := net.Listen("tcp", c.metrics)
		if err != nil {
			_ = ln.Close()
			return fmt.Errorf("node --metrics-bind-address: %w", err)
		}
		go serveMetrics(ctx, mln, agent, log)
	}
	return agent.Run(ctx, ln)
}

// serveMetrics serves the agent's metrics, with the process's and the Go runtime's, on ln
// until ctx ends. Plain HTTP, as the kubelet's own read-only figures go: the figures are
// counts of the agent's work, and nothing a scrape may change.
func serveMetrics(ctx context.Context, ln net.Listener, agent *nodeagent.Agent, log *slog.Logger) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(agent.Collector(), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{MaxRequestsInFlight: 4, Timeout: 10 * time.Second}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 15 * time.Second, IdleTimeout: 2 * time.Minute}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Error("Serving metrics failed", "address", ln.Addr().String(), "error", err)
	}
}
