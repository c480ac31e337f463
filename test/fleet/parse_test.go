package fleet

import (
	"strings"
	"testing"
)

// TestParseMetrics runs always (it needs no cluster): the harness reads the
// operator's heap and request counts from the Prometheus text format.
func TestParseMetrics(t *testing.T) {
	in := `# HELP go_memstats_heap_inuse_bytes Number of heap bytes that are in use.
# TYPE go_memstats_heap_inuse_bytes gauge
go_memstats_heap_inuse_bytes 1.2345678e+07
go_memstats_heap_alloc_bytes 1e+07
rest_client_requests_total{code="200",host="127.0.0.1:6443",method="GET"} 10
rest_client_requests_total{code="409",host="127.0.0.1:6443",method="PATCH"} 2
rest_client_requests_total{code="201",host="127.0.0.1:6443",method="POST"} 3
controller_runtime_reconcile_total{controller="x",result="success"} 99
`
	m, err := parseMetrics(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if m.heapInuse != 12345678 || m.heapAlloc != 1e7 || m.requests != 15 || m.conflicts != 2 {
		t.Errorf("parsed %+v", m)
	}
	if _, err := parseMetrics(strings.NewReader("up 1\n")); err == nil {
		t.Error("no heap metric: want an error")
	}
}
