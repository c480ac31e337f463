package fleet

import (
	"math"
	"strconv"
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

// TestParseFlowWaits: the flow-control wait histogram, by priority level, as deltas,
// and the bucket bound that holds a quantile.
func TestParseFlowWaits(t *testing.T) {
	const name = "apiserver_flowcontrol_request_wait_duration_seconds"
	sample := func(level, le string, v int) string {
		return name + `_bucket{execute="true",flow_schema="x",le="` + le + `",priority_level="` + level + `"} ` + strconv.Itoa(v) + "\n"
	}
	before := parseFlowWaits([]byte(sample("operator", "0.005", 10) + sample("operator", "0.05", 10) + sample("operator", "+Inf", 10) +
		name + `_sum{execute="true",flow_schema="x",priority_level="operator"} 0.01` + "\n" +
		name + `_count{execute="true",flow_schema="x",priority_level="operator"} 10` + "\n"))
	after := parseFlowWaits([]byte(sample("operator", "0.005", 108) + sample("operator", "0.05", 110) + sample("operator", "+Inf", 110) +
		name + `_sum{execute="true",flow_schema="x",priority_level="operator"} 0.21` + "\n" +
		name + `_count{execute="true",flow_schema="x",priority_level="operator"} 110` + "\n" +
		sample("breaker-reports", "1", 0) + sample("breaker-reports", "+Inf", 0)))
	d := after.minus(before)
	w := d["operator"]
	if len(d) != 1 || w == nil || w.count != 100 || math.Abs(w.sum-0.2) > 1e-9 {
		t.Fatalf("delta %v", d)
	}
	if q := w.quantile(0.5); q != 0.005 {
		t.Errorf("p50 bound %v, want 0.005", q)
	}
	if q := w.quantile(0.99); q != 0.05 {
		t.Errorf("p99 bound %v, want 0.05 (2 of 100 above 5 ms)", q)
	}
}

// TestParseWatches: the watches the API server holds, by resource and scope, and the
// config watches as what the ConfigMap watches grew by.
func TestParseWatches(t *testing.T) {
	const name = "apiserver_longrunning_requests"
	line := func(verb, resource, scope string, v int) string {
		return name + `{component="apiserver",group="",resource="` + resource + `",scope="` + scope + `",subresource="",verb="` + verb + `",version="v1"} ` + strconv.Itoa(v) + "\n"
	}
	base := parseWatches([]byte(line("WATCH", "configmaps", "resource", 1) + line("WATCH", "configmaps", "namespace", 1)))
	w := parseWatches([]byte(line("WATCH", "configmaps", "resource", 51) + line("WATCH", "configmaps", "namespace", 1) +
		line("WATCH", "pods", "cluster", 52) + line("CONNECT", "pods", "namespace", 3) + line("WATCH", "nodes", "cluster", 0)))
	if got := w.config(base); got != 50 {
		t.Errorf("config watches %v, want 50", got)
	}
	if got := w.total(); got != 104 {
		t.Errorf("all watches %v, want 104 (CONNECT and zero gauges are no watches)", got)
	}
	if got := w.String(); got != "pods (cluster) 52, configmaps (resource) 51, configmaps (namespace) 1" {
		t.Errorf("String() = %q", got)
	}
}

// TestHollowSettings: FLEET_HOLLOW needs nodes, the real agents stop at maxRealNodePods,
// and hollow hosts come one per hollowHostPods pods, at most one per CPU.
func TestHollowSettings(t *testing.T) {
	for _, c := range []struct {
		pods, nodes, hollow string
		ok                  bool
	}{
		{"1000", "", "true", false},
		{"20001", "200", "", false},
		{"20000", "200", "false", true},
		{"100000", "1000", "true", true},
		{"1000", "10", "maybe", false},
	} {
		t.Setenv("FLEET_PODS", c.pods)
		t.Setenv("FLEET_NODES", c.nodes)
		t.Setenv("FLEET_HOLLOW", c.hollow)
		if _, err := loadSettings(); (err == nil) != c.ok {
			t.Errorf("FLEET_PODS=%s FLEET_NODES=%s FLEET_HOLLOW=%s: error %v, want ok=%v", c.pods, c.nodes, c.hollow, err, c.ok)
		}
	}
	for _, c := range []struct{ pods, cpus, want int }{{2000, 2, 1}, {25001, 2, 2}, {100000, 2, 2}, {100000, 8, 4}, {1, 1, 1}} {
		if got := hollowHosts(c.pods, c.cpus); got != c.want {
			t.Errorf("hollowHosts(%d, %d) = %d, want %d", c.pods, c.cpus, got, c.want)
		}
	}
}
