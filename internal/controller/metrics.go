package controller

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// Metrics are the operator's per-CircuitBreaker series, served on the
// manager's metrics endpoint. They are what the Grafana dashboard and the
// alert rule in docs/ are built on.
type Metrics struct {
	state       *prometheus.GaugeVec
	members     *prometheus.GaugeVec
	transitions *prometheus.CounterVec

	mu    sync.Mutex
	known map[string]map[string]bool // namespace → breaker names with series; guarded by mu
}

var allStates = []resiliencev1alpha1.State{resiliencev1alpha1.StateClosed, resiliencev1alpha1.StateOpen, resiliencev1alpha1.StateHalfOpen}

// NewMetrics creates the series and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fusebox_circuitbreaker_state",
			Help: "1 for the CircuitBreaker's current state (Closed, Open, HalfOpen), 0 for the others; no series until a pod reports.",
		}, []string{"namespace", "name", "state"}),
		members: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fusebox_circuitbreaker_members",
			Help: "Pods reporting the CircuitBreaker, by their circuit state.",
		}, []string{"namespace", "name", "state"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fusebox_circuitbreaker_transitions_total",
			Help: "Changes of the CircuitBreaker's state seen by the operator, by the state entered.",
		}, []string{"namespace", "name", "to"}),
		known: map[string]map[string]bool{},
	}
	reg.MustRegister(m.state, m.members, m.transitions)
	return m
}

// observe records one breaker's aggregated status.
func (m *Metrics) observe(cb *resiliencev1alpha1.CircuitBreaker) {
	if m == nil {
		return
	}
	ns, name := cb.Namespace, cb.Name
	counts := cb.Status.MemberCounts
	if counts == nil {
		counts = &resiliencev1alpha1.MemberCounts{}
	}
	for _, s := range allStates {
		if cb.Status.State == "" {
			m.state.DeleteLabelValues(ns, name, string(s))
		} else {
			m.state.WithLabelValues(ns, name, string(s)).Set(boolToFloat(cb.Status.State == s))
		}
	}
	m.members.WithLabelValues(ns, name, string(resiliencev1alpha1.StateClosed)).Set(float64(counts.Closed))
	m.members.WithLabelValues(ns, name, string(resiliencev1alpha1.StateOpen)).Set(float64(counts.Open))
	m.members.WithLabelValues(ns, name, string(resiliencev1alpha1.StateHalfOpen)).Set(float64(counts.HalfOpen))
}

// transition counts a change of a breaker's state.
func (m *Metrics) transition(cb *resiliencev1alpha1.CircuitBreaker, to resiliencev1alpha1.State) {
	if m == nil || to == "" {
		return
	}
	m.transitions.WithLabelValues(cb.Namespace, cb.Name, string(to)).Inc()
}

// forget drops the series of the namespace's breakers that are not in live.
func (m *Metrics) forget(namespace string, live []resiliencev1alpha1.CircuitBreaker) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := map[string]bool{}
	for i := range live {
		now[live[i].Name] = true
	}
	for name := range m.known[namespace] {
		if !now[name] {
			labels := prometheus.Labels{"namespace": namespace, "name": name}
			m.state.DeletePartialMatch(labels)
			m.members.DeletePartialMatch(labels)
			m.transitions.DeletePartialMatch(labels)
		}
	}
	if len(now) == 0 {
		delete(m.known, namespace)
	} else {
		m.known[namespace] = now
	}
}

func boolToFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Describe sends the descriptors of every series, so the metrics can be
// checked against the dashboards and rules built on them.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.state.Describe(ch)
	m.members.Describe(ch)
	m.transitions.Describe(ch)
}
