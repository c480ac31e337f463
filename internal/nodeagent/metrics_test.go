package nodeagent

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// gather returns the agent's metrics by name, each as its samples' values by their labels
// ("" for none; a histogram's sample count).
func gather(t *testing.T, c prometheus.Collector) map[string]map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	must(t, reg.Register(c))
	families, err := reg.Gather()
	must(t, err)
	out := map[string]map[string]float64{}
	for _, f := range families {
		out[f.GetName()] = map[string]float64{}
		for _, m := range f.GetMetric() {
			var key string
			for _, l := range m.GetLabel() {
				key += l.GetName() + "=" + l.GetValue()
			}
			out[f.GetName()][key] = value(m)
		}
	}
	return out
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Histogram != nil:
		return float64(m.GetHistogram().GetSampleCount())
	}
	return 0
}

// TestMetrics: what an agent has done shows in its collector: the pods it holds a line
// of, its objects, its writes and their latency, the requests it refused by status, its
// pods' tokens checked against the issuer's keys (none needing a review), its config
// streams, and no change unwritten once it is idle.
func TestMetrics(t *testing.T) {
	t.Parallel()
	node := newNode(t)
	ns := newNamespace(t)
	agent := startAgent(t, node, agentOptions{})
	_, tokens := podsOnNode(t, agent, ns, node.Name, 2)
	for _, tok := range tokens {
		if status, body := putReport(t, agent, tok, tripped); status != http.StatusOK {
			t.Fatalf("%d %s", status, body)
		}
	}
	if status, _ := putReport(t, agent, "", tripped); status != http.StatusUnauthorized {
		t.Fatalf("no token: %d", status)
	}
	eventually(t, "written", func() error {
		if n, _ := counted(t, ns, node.Name, "payments", ""); n != 2 || !agent.Written() {
			return errors.New("not yet")
		}
		return nil
	})
	m := gather(t, agent.Collector())
	for _, want := range []struct {
		name, labels string
		at, most     float64
	}{
		{"fusebox_node_agent_pods_reporting", "", 2, 2},
		{"fusebox_node_agent_report_objects", "", 1, 1},
		{"fusebox_node_agent_report_writes_total", "result=success", 1, 2},
		{"fusebox_node_agent_report_writes_total", "result=failure", 0, 0},
		{"fusebox_node_agent_report_write_duration_seconds", "", 1, 2},
		{"fusebox_node_agent_oldest_unwritten_change_seconds", "", 0, 0},
		{"fusebox_node_agent_refused_requests_total", "code=401", 1, 1},
		{"fusebox_node_agent_token_reviews_total", "", 0, 0},
		{"fusebox_node_agent_tokens_verified_total", "", 2, 2},
		{"fusebox_node_agent_config_streams", "", 0, 0},
	} {
		got, ok := m[want.name][want.labels]
		if !ok || got < want.at || got > want.most {
			t.Errorf("%s{%s} = %v (present %v), want %v to %v", want.name, want.labels, got, ok, want.at, want.most)
		}
	}
	if _, ok := m["fusebox_node_agent_live_pod_reads_total"]; !ok {
		t.Error("no fusebox_node_agent_live_pod_reads_total")
	}
}

// TestOldestUnwrittenChange: the age of the oldest change no write has carried grows while
// the API server refuses the writes, and is 0 once one succeeds.
func TestOldestUnwrittenChange(t *testing.T) {
	p := newPacer(t)
	age := func() time.Duration { _, _, oldest := p.book.gauges(p.clock.Now()); return oldest }
	if a := age(); a != 0 {
		t.Errorf("nothing reported: oldest change %v, want 0", a)
	}
	p.rec.fail = errors.New("the API server is away")
	p.put("shop", "a", tripped)
	for range 20 {
		p.step(time.Second)
	}
	if a := age(); a != 20*time.Second {
		t.Errorf("20 s of failed writes: oldest change %v, want 20s", a)
	}
	p.rec.fail = nil
	p.step(5 * time.Second)
	if a := age(); a != 0 {
		t.Errorf("written: oldest change %v, want 0", a)
	}
	w, f := p.book.counts()
	if w != 1 || f < 5 {
		t.Errorf("%d writes, %d failures; want 1 and the failures of 20 s", w, f)
	}
}
