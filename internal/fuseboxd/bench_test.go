package fuseboxd_test

import (
	"fmt"
	"net/http"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/internal/fuseboxd"
)

func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// The API's cost as a client sees it: acquire and settle, each an HTTP/1.1 request over
// the Unix socket on a kept-alive connection, server and clients in this one process
// (so on a 2-core machine they share the cores, as a pod's workers and its sidecar do).
// Reported: ns/op per pair, pairs/s, the p50 and p99 of one pair's latency, and the CPU
// time of a pair.
//
// server=wire is the daemon as it runs (serveConn, wire.go); server=net-http serves the
// same API with Go's HTTP server alone, as it did before. client=lean is a worker's
// client (leanclient_test.go: one connection, buffers reused, as curl has); client=net-http
// is Go's HTTP client, whose own allocations and goroutines weigh on the same cores.

func BenchmarkPermitRoundTrip(b *testing.B) {
	for _, server := range []string{"wire", "net-http"} {
		for _, client := range []string{"lean", "net-http"} {
			for _, clients := range []int{1, 32} {
				b.Run(fmt.Sprintf("server=%s/client=%s/clients=%d", server, client, clients), func(b *testing.B) {
					benchmarkPairs(b, server, client, clients)
				})
			}
		}
	}
}

func benchmarkPairs(b *testing.B, server, client string, clients int) {
	serve := (*fuseboxd.Server).Serve
	if server == "net-http" {
		serve = (*fuseboxd.Server).ServeNetHTTP
	}
	d := startDaemonServed(b, fuseboxd.Options{}, map[string]string{"payments": testConfig("payments", 1, `{"minimumThroughput":1000000}`)}, serve)
	d.client.Transport.(*http.Transport).MaxIdleConnsPerHost = clients
	pairs := make([]func(), clients)
	for c := range pairs {
		pairs[c] = netHTTPPair(b, d)
		if client == "lean" {
			pairs[c] = leanPair(b, d.sock)
		}
		for range 100 {
			pairs[c]() // connections open and warm
		}
	}
	lat := make([][]time.Duration, clients)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime(b)
	start := time.Now()
	var wg sync.WaitGroup
	for c := range clients {
		n := b.N / clients
		if c < b.N%clients {
			n++
		}
		lat[c] = make([]time.Duration, 0, n)
		pair := pairs[c]
		wg.Go(func() {
			for range n {
				t0 := time.Now()
				pair()
				lat[c] = append(lat[c], time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu := cpuTime(b) - cpu0
	b.StopTimer()
	all := slices.Concat(lat...)
	slices.Sort(all)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "pairs/s")
	b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
	// What a pair costs in CPU (server and client, user and system), which the
	// machine's other load does not inflate as it does wall-clock time: 2 cores
	// divided by it is the rate this process could sustain on an idle machine.
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/pair")
}

const settleSuccess = `{"outcome":"success","durationMs":1}`

// permitOf is the permit id of a 201's body: the one field a client must read; a full
// decode would measure encoding/json, not the API.
func permitOf(body []byte) []byte {
	const prefix = `{"permit":"`
	return body[len(prefix) : len(prefix)+26]
}

func netHTTPPair(b *testing.B, d *daemon) func() {
	return func() {
		code, _, body := d.do("POST", "/v1/breakers/payments/permits", "")
		if code != http.StatusCreated {
			b.Fatalf("acquire: %d %s", code, body)
		}
		if code, _, body := d.do("POST", "/v1/permits/"+string(permitOf(body)), settleSuccess); code != http.StatusNoContent {
			b.Fatalf("settle: %d %s", code, body)
		}
	}
}

func leanPair(b *testing.B, sock string) func() {
	c, err := dialLean(sock)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	acquire, path := []byte("/v1/breakers/payments/permits"), []byte("/v1/permits/")
	settle := []byte(settleSuccess)
	return func() {
		code, body, err := c.post(acquire, nil)
		if err != nil || code != http.StatusCreated {
			b.Fatalf("acquire: %d %s %v", code, body, err)
		}
		path = append(path[:len("/v1/permits/")], permitOf(body)...)
		if code, body, err := c.post(path, settle); err != nil || code != http.StatusNoContent {
			b.Fatalf("settle: %d %s %v", code, body, err)
		}
	}
}
