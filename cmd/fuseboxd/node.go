package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/fusebox-dev/fusebox/internal/nodeagent"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// runNode runs the node agent until SIGTERM or SIGINT: NODE_NAME names its node, and it
// reaches the API server in-cluster (or through kubeconfig, outside a pod). On the signal
// it stops serving and, within grace, writes the reports it still holds.
func runNode(listen, kubeconfig string, grace time.Duration, log *slog.Logger) error {
	node := os.Getenv(breakerconfig.EnvNodeName)
	if node == "" {
		return fmt.Errorf("--node: %s is not set: give the agent its node with the downward API (fieldRef spec.nodeName)", breakerconfig.EnvNodeName)
	}
	var (
		cfg *rest.Config
		err error
	)
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return fmt.Errorf("--node: %w", err)
	}
	agent, err := nodeagent.New(nodeagent.Options{Config: cfg, NodeName: node, Logger: log, ShutdownGrace: grace})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("--node-listen: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return agent.Run(ctx, ln)
}
