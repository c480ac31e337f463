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
// Reported: ns/op per pair, pairs/s, and the p50 and p99 of one pair's latency.

func BenchmarkPermitRoundTrip(b *testing.B) {
	for _, clients := range []int{1, 32} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			d := startDaemon(b, fuseboxd.Options{}, map[string]string{"payments": testConfig("payments", 1, `{"minimumThroughput":1000000}`)})
			d.client.Transport.(*http.Transport).MaxIdleConnsPerHost = clients
			settle := `{"outcome":"success","durationMs":1}`
			pair := func() {
				code, _, body := d.do("POST", "/v1/breakers/payments/permits", "")
				if code != http.StatusCreated {
					b.Fatalf("acquire: %d %s", code, body)
				}
				// The permit id is the one field a client must read; a full decode would
				// measure encoding/json, not the API.
				id := string(body[len(`{"permit":"`) : len(`{"permit":"`)+26])
				if code, _, body := d.do("POST", "/v1/permits/"+id, settle); code != http.StatusNoContent {
					b.Fatalf("settle: %d %s", code, body)
				}
			}
			for range 100 {
				pair() // connections open and warm
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
		})
	}
}
