package manifests

import (
	"encoding/json"
	"os"
	"regexp"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/yaml"

	"github.com/fusebox-dev/fusebox/internal/controller"
	"github.com/fusebox-dev/fusebox/internal/nodeagent"
)

// The dashboard and alert rules in docs/monitoring must parse and use only
// series the operator or the node agents export.
func TestMonitoringDocsUseExportedSeries(t *testing.T) {
	// Gather lists only series with values; read the descriptors instead.
	exported := map[string]bool{}
	ch := make(chan *prometheus.Desc, 16)
	go func() {
		controller.NewMetrics(prometheus.NewRegistry()).Describe(ch)
		// A collector's descriptors are fixed; describing them reads no agent.
		(&nodeagent.Agent{}).Collector().Describe(ch)
		close(ch)
	}()
	nameRE := regexp.MustCompile(`fqName: "([a-z_]+)"`)
	for d := range ch {
		if m := nameRE.FindStringSubmatch(d.String()); m != nil {
			exported[m[1]] = true
		}
	}
	if len(exported) == 0 {
		t.Fatal("found no exported series")
	}

	dashboard, err := os.ReadFile("../../docs/monitoring/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d map[string]any
	if err := json.Unmarshal(dashboard, &d); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	rules, err := os.ReadFile("../../docs/monitoring/prometheus-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var r map[string]any
	if err := yaml.Unmarshal(rules, &r); err != nil {
		t.Fatalf("rules: %v", err)
	}

	used := regexp.MustCompile(`fusebox_[a-z_]+`)
	for file, data := range map[string][]byte{"dashboard": dashboard, "rules": rules} {
		names := used.FindAllString(string(data), -1)
		if len(names) == 0 {
			t.Errorf("%s uses no Fusebox series", file)
		}
		for _, n := range names {
			if !exported[n] {
				t.Errorf("%s uses %s, which neither the operator nor the node agent exports (they export %v)", file, n, exported)
			}
		}
	}
}
