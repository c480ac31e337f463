package testutil

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/fusebox-dev/fusebox/internal/controller"
)

// StartOperator runs the operator's reconcilers against cfg in this process, wired as
// cmd/manager wires them (no metrics server, no webhooks, no leader election): it renders
// the CircuitBreakers into the ConfigMaps the pods read and adds their reports up into
// the status. It runs until ctx is done or stop is called; stop returns what the manager
// returned, and may be called once.
func StartOperator(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme) (stop func() error, err error) {
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache:   cache.Options{ByObject: controller.CacheByObject()},
	})
	if err != nil {
		return nil, fmt.Errorf("operator: %w", err)
	}
	if err := controller.NewReconciler(mgr, controller.NewMetrics(prometheus.NewRegistry())).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("operator: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- mgr.Start(ctx) }()
	return func() error {
		cancel()
		return <-stopped
	}, nil
}
