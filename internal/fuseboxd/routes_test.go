package fuseboxd_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/internal/fuseboxd"
)

// TestRouteTableAgreement: both servers are built from one route table, and agree on
// every route of it. Each route, with its wildcard filled in, is answered by hand on the
// wire (nothing handed to net/http) and gets the answer the net/http server alone gives;
// each near miss of a route (another method, a segment more, one less, a trailing slash,
// a wildcard of two segments) gets the same answer from both. The requests are derived
// from the table, so a route added there is checked here without this test changing.
func TestRouteTableAgreement(t *testing.T) {
	configs := map[string]string{"payments": testConfig("payments", 1, `{"minimumThroughput":1000}`)}
	wire := startDaemon(t, fuseboxd.Options{}, configs)
	reference := startDaemonServed(t, fuseboxd.Options{}, configs, (*fuseboxd.Server).ServeNetHTTP)
	samples := map[string]string{"name": "payments", "permit": "NOSUCHPERMIT"}
	methods := []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodHead}
	// Every POST carries a body that every route taking one accepts.
	const body = `{"outcome":"ignored"}`

	exchange := func(t *testing.T, d *daemon, method, path string) wireAnswer {
		t.Helper()
		conn, err := net.Dial("unix", d.sock)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		b := ""
		if method != http.MethodGet && method != http.MethodHead {
			b = body
		}
		if _, err := fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: fuseboxd\r\nContent-Length: %d\r\n\r\n%s", method, path, len(b), b); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: method})
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		got, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return wireAnswer{
			Status: resp.StatusCode, ContentType: resp.Header.Get("Content-Type"),
			ContentLength: resp.Header.Get("Content-Length"), RetryAfter: resp.Header.Get("Retry-After"),
			Connection: resp.Header.Get("Connection"),
			Body:       permitID.ReplaceAllString(string(got), `"permit":"ID"`),
		}
	}
	agree := func(t *testing.T, method, path string) {
		t.Helper()
		w, r := exchange(t, wire, method, path), exchange(t, reference, method, path)
		if w != r {
			t.Errorf("%s %s:\nserveConn %+v\nnet/http  %+v", method, path, w, r)
		}
	}

	routes := fuseboxd.Routes()
	if len(routes) == 0 {
		t.Fatal("the route table is empty")
	}
	for _, rt := range routes {
		path := rt.Pattern
		if rt.Wildcard != "" {
			sample, ok := samples[rt.Wildcard]
			if !ok {
				t.Fatalf("route %s %s: no sample value for {%s}; add one to samples", rt.Method, rt.Pattern, rt.Wildcard)
			}
			path = strings.Replace(path, "{"+rt.Wildcard+"}", sample, 1)
		}
		t.Run(rt.Method+" "+rt.Pattern, func(t *testing.T) {
			before := wire.srv.HandedOff()
			agree(t, rt.Method, path)
			if handed := wire.srv.HandedOff() - before; handed != 0 {
				t.Errorf("%s %s was handed to net/http: the wire does not answer a route of the table", rt.Method, path)
			}
			for _, m := range methods {
				if m != rt.Method {
					agree(t, m, path)
				}
			}
			parent := path[:strings.LastIndexByte(path, '/')]
			misses := []string{path + "/", path + "/extra", parent + "/"}
			if parent != "" {
				misses = append(misses, parent)
			}
			if rt.Wildcard != "" {
				misses = append(misses, strings.Replace(rt.Pattern, "{"+rt.Wildcard+"}", "two/segments", 1))
			}
			for _, miss := range misses {
				agree(t, rt.Method, miss)
			}
		})
	}
}
