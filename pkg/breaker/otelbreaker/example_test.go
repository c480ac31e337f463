package otelbreaker_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/otelbreaker"
)

// Serve a breaker's metrics on /metrics with the OpenTelemetry Prometheus exporter.
func Example() {
	// The exporter is a metric reader that Prometheus scrapes. A real program would use
	// prometheus.DefaultRegisterer and http.Handle("/metrics", promhttp.Handler()).
	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry), otelprom.WithoutScopeInfo(),
		otelprom.WithoutTargetInfo())
	if err != nil {
		panic(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer mp.Shutdown(context.Background())

	obs, err := otelbreaker.New(mp, otelbreaker.WithPrefix("backend"))
	if err != nil {
		panic(err)
	}
	payments, err := breaker.New("payments", breaker.DefaultPolicy(), breaker.WithObserver(obs))
	if err != nil {
		panic(err)
	}
	obs.Track(payments) // for the failures and successes gauges

	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	ctx := context.Background()
	_ = payments.Execute(ctx, func(context.Context) error { return nil })
	_ = payments.Execute(ctx, func(context.Context) error { return errors.New("503") })

	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		if l := lines.Text(); strings.HasPrefix(l, "backend_breaker_calls") || strings.HasPrefix(l, "backend_breaker_state") {
			fmt.Println(l)
		}
	}
	// Output:
	// backend_breaker_calls_total{circuit_breaker_initial_state="closed",circuit_breaker_name="payments",circuit_breaker_outcome="failure",circuit_breaker_state="closed"} 1
	// backend_breaker_calls_total{circuit_breaker_initial_state="closed",circuit_breaker_name="payments",circuit_breaker_outcome="success",circuit_breaker_state="closed"} 1
	// backend_breaker_state{circuit_breaker_name="payments"} 0
}
