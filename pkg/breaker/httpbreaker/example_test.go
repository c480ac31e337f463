package httpbreaker_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/httpbreaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/registry"
)

func ExampleTransport() {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "overloaded", http.StatusServiceUnavailable)
	}))
	defer upstream.Close()

	p := breaker.DefaultPolicy()
	p.MinimumThroughput = 2
	b, _ := breaker.New("upstream", p)
	client := &http.Client{Transport: httpbreaker.NewTransport(b, nil)}

	for range 3 {
		resp, err := client.Get(upstream.URL)
		if err != nil {
			fmt.Println("not sent:", errors.Is(err, breaker.ErrOpen))
			continue
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode)
	}
	// Output:
	// 503
	// 503
	// not sent: true
}

func ExampleHandler() {
	b, _ := breaker.New("checkout", breaker.DefaultPolicy())
	srv := httptest.NewServer(httpbreaker.NewHandler(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})))
	defer srv.Close()

	b.Trip() // for instance, an operator forced it open
	resp, err := http.Get(srv.URL)
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, resp.Header.Get("Retry-After") != "")
	// Output: 503 true
}

// One breaker per host: a client that calls several hosts keeps calling the healthy ones
// while the circuit of a failing one is open.
func ExampleNewGroupTransport() {
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "overloaded", http.StatusServiceUnavailable)
	}))
	defer down.Close()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()

	p := breaker.DefaultPolicy()
	p.MinimumThroughput = 2
	hosts, _ := registry.NewGroup("partners", p)
	client := &http.Client{Transport: httpbreaker.NewGroupTransport(hosts, httpbreaker.ByHost, nil)}

	for _, u := range []string{down.URL, down.URL, down.URL, up.URL} {
		resp, err := client.Get(u)
		if err != nil {
			fmt.Println("not sent:", errors.Is(err, breaker.ErrOpen))
			continue
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode)
	}
	s := hosts.Summary()
	fmt.Println(s.Keys, "hosts,", s.Open, "open")
	// Output:
	// 503
	// 503
	// not sent: true
	// 200
	// 2 hosts, 1 open
}

// One breaker per route: a route whose backend fails answers 503 while the others serve.
func ExampleNewGroupHandler() {
	routes, _ := registry.NewGroup("api-routes", breaker.DefaultPolicy())
	mux := http.NewServeMux()
	// Wrapping each route's handler: the mux has set Request.Pattern, which ByPattern (the
	// default) reads. In front of the whole mux, use httpbreaker.ByMuxPattern(mux).
	mux.Handle("GET /items/{id}", httpbreaker.NewGroupHandler(routes, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "item", r.PathValue("id"))
	})))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/items/7")
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, routes.Summary().Keys)
	// Output: 200 1
}
