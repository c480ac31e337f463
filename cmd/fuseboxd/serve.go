package main

import (
	"context"
	"errors"
	"flag"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/fusebox-dev/fusebox/internal/fuseboxd"
	"github.com/fusebox-dev/fusebox/pkg/breaker/kube"
)

// defaultSocket is where the injected sidecar serves, in the directory the pod webhook
// mounts into the pod's containers.
const defaultSocket = "/var/run/fusebox/fusebox.sock"

// serveConfig is what `fuseboxd serve` runs with.
type serveConfig struct {
	socket, listen, configDir, kubeconfig string
	grace                                 time.Duration
	debug                                 bool
	limits                                limits
}

func (c *serveConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&c.socket, "socket", defaultSocket, "Unix socket to serve the API on")
	fs.StringVar(&c.listen, "listen", "", "also serve on this loopback address (127.0.0.1:PORT); no other address is accepted")
	fs.StringVar(&c.configDir, "config-dir", "", "read the breaker config from DIR/<name>.json (the ConfigMap's layout) instead of the cluster, and report nowhere")
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "outside a pod: reach the cluster with this kubeconfig, speaking for the pod that POD_NAME, POD_NAMESPACE and POD_UID name")
	fs.DurationVar(&c.grace, "shutdown-grace", 5*time.Second, "how long requests in progress and the last report write may take at shutdown")
	fs.BoolVar(&c.debug, "debug", false, "log at debug level")
	c.limits.register(fs)
}

// runServe is `fuseboxd serve`.
func runServe(args []string) error {
	var c serveConfig
	parse("serve", args, c.register)
	return serve(c)
}

// serve runs the sidecar until SIGTERM or SIGINT.
func serve(c serveConfig) error {
	if err := c.limits.check(); err != nil {
		return err
	}
	log := newLogger(c.debug)

	// The socket first: a path another daemon serves is refused before anything starts,
	// with that line alone.
	lns, err := listeners(c.socket, c.listen)
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
	case c.configDir != "":
		o = kube.Options{ConfigDir: c.configDir}
	case c.kubeconfig != "":
		cfg, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig)
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

	// The connection outlives the server: permits settled at shutdown still reach the
	// report.
	connCtx, disconnect := context.WithCancel(context.Background())
	defer disconnect()
	conn, err := kube.Connect(connCtx, o)
	if err != nil {
		return err
	}
	srv, err := fuseboxd.New(c.limits.apply(fuseboxd.Options{
		Registry:  conn.Registry(),
		Published: conn.Published,
		Ready:     conn.Loaded,
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

	ctx, cancel := context.WithTimeout(context.Background(), c.grace)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		log.Warn("Requests still in progress at shutdown", "error", err)
	}
	// Leave the report consistent: wait (within the grace period) for the transitions the
	// last settles caused to be written.
	for !conn.ReportWritten() && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
	disconnect()
	select {
	case <-conn.Done():
	case <-ctx.Done():
	}
	if serveErr != nil && !errors.Is(serveErr, net.ErrClosed) {
		return serveErr
	}
	return nil
}
