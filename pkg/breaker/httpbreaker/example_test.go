package httpbreaker_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/httpbreaker"
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
