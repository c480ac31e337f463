package kube_test

import (
	"context"
	"log"
	"net/http"

	"k8s.io/client-go/rest"

	"github.com/fusebox-dev/fusebox/pkg/breaker/httpbreaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/kube"
)

// An application pod guards its calls to payments-api with the breaker of that name,
// configured by the CircuitBreaker payments-api of its namespace, and reports its state in
// its own BreakerReport. POD_NAME, POD_NAMESPACE and POD_UID come from the downward API;
// kube.FromEnvironment(ctx) does the same in one call.
func Example() {
	ctx := context.Background() // cancel it to stop watching and reporting

	cfg, err := rest.InClusterConfig()
	if err != nil {
		log.Fatal(err)
	}
	reg, err := kube.Start(ctx, kube.Options{
		Config:    cfg,
		Namespace: "shop",            // os.Getenv("POD_NAMESPACE")
		Pod:       "web-7d9f8-x2x4q", // os.Getenv("POD_NAME")
		// os.Getenv("POD_UID"): the Pod its report is owned by (the downward API's
		// metadata.uid; the pod has no access to Pods to read it).
		PodUID: "3f1c9a52-7d4e-4b0a-9c2d-1e8f6a5b7c90",
	})
	if err != nil {
		log.Fatal(err)
	}

	client := &http.Client{Transport: httpbreaker.NewTransport(reg.Get("payments-api"), nil)}
	resp, err := client.Get("http://payments-api.shop.svc/healthz")
	if err != nil {
		// errors.Is(err, breaker.ErrOpen) when the circuit is open: nothing was sent.
		log.Print(err)
		return
	}
	resp.Body.Close()
}

// A client of many partner hosts keeps one breaker per host, all configured by the
// CircuitBreaker partner-hosts. The pod's report carries one entry for the Group (how many
// hosts, how many open, the worst few), not one per host.
func Example_group() {
	reg, err := kube.FromEnvironment(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	hosts := reg.Group("partner-hosts")
	hosts.SetMaxKeys(500)
	client := &http.Client{Transport: httpbreaker.NewGroupTransport(hosts, httpbreaker.ByHost, nil)}
	resp, err := client.Get("https://eu.partner.example/orders")
	if err != nil {
		log.Print(err) // errors.Is(err, breaker.ErrOpen) while eu.partner.example's circuit is open
		return
	}
	resp.Body.Close()
}
