package nodeagent

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The agent's metrics (docs/fuseboxd.md, "Metrics"). Every series is one per agent, none
// per namespace, pod or breaker: a node's worth of namespaces would make a cluster's
// series grow with nodes times namespaces. The figures are read from the agent when
// scraped, so each agent of a process (the fleet benchmark runs many) has its own.
var (
	descPods = prometheus.NewDesc("fusebox_node_agent_pods_reporting",
		"Pods of the node whose report the agent holds (a line with at least one breaker).", nil, nil)
	descObjects = prometheus.NewDesc("fusebox_node_agent_report_objects",
		"NodeBreakerReports of the node the API server holds, one per namespace with reporting pods.", nil, nil)
	descWrites = prometheus.NewDesc("fusebox_node_agent_report_writes_total",
		"NodeBreakerReport writes (creates, updates, deletes), by result: success or failure (each failure is retried).", []string{"result"}, nil)
	descLatency = prometheus.NewDesc("fusebox_node_agent_report_write_duration_seconds",
		"How long NodeBreakerReport writes took, successful or not, retries of a conflict included.", nil, nil)
	descOldest = prometheus.NewDesc("fusebox_node_agent_oldest_unwritten_change_seconds",
		"Age of the oldest change of a pod's report that no write has carried to the API server yet; 0 when all is written.", nil, nil)
	descRefused = prometheus.NewDesc("fusebox_node_agent_refused_requests_total",
		"Requests the agent refused, recording nothing, by HTTP status; 503 includes connections past the port's cap.", []string{"code"}, nil)
	descReviews = prometheus.NewDesc("fusebox_node_agent_token_reviews_total",
		"TokenReviews the agent asked the API server for: one per token, not per request, while the answer is kept.", nil, nil)
	descVerified = prometheus.NewDesc("fusebox_node_agent_tokens_verified_total",
		"Pods' tokens the agent checked itself against the service-account issuer's keys, asking the API server nothing: one per token.", nil, nil)
	descLiveReads = prometheus.NewDesc("fusebox_node_agent_live_pod_reads_total",
		"Pods the agent read from the API server because its pod cache did not have them.", nil, nil)
	descStreams = prometheus.NewDesc("fusebox_node_agent_config_streams",
		"Config streams open to the node's pods.", nil, nil)
)

// Collector returns the agent's metrics, to register with a Prometheus registry (fuseboxd
// --node serves them on --metrics-bind-address). Each agent has its own: two agents in one
// registry need a label to tell them apart (prometheus.WrapRegistererWith).
func (a *Agent) Collector() prometheus.Collector { return agentCollector{a} }

type agentCollector struct{ a *Agent }

var _ prometheus.Collector = agentCollector{}

func (c agentCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPods, descObjects, descWrites, descLatency, descOldest, descRefused, descReviews, descVerified, descLiveReads, descStreams} {
		ch <- d
	}
}

func (c agentCollector) Collect(ch chan<- prometheus.Metric) {
	a := c.a
	b := a.book
	pods, objects, oldest := b.gauges(b.clock.Now())
	writes, failures := b.counts()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge(descPods, float64(pods))
	gauge(descObjects, float64(objects))
	gauge(descOldest, oldest.Seconds())
	counter(descWrites, writes, "success")
	counter(descWrites, failures, "failure")
	ch <- b.latency.histogram()
	for code, n := range a.refused.byStatus() {
		counter(descRefused, n, strconv.Itoa(code))
	}
	counter(descReviews, a.auth.reviews.Load())
	counter(descVerified, a.auth.keys.verified.Load())
	counter(descLiveReads, a.pods.liveLookups.Load())
	gauge(descStreams, float64(a.streams.Load()))
}

// histogram is the latency kept so far as a Prometheus histogram: its buckets are
// cumulative already.
func (l *writeLatency) histogram() prometheus.Metric {
	buckets := make(map[float64]uint64, len(writeLatencyBuckets))
	for i, bound := range writeLatencyBuckets {
		buckets[bound.Seconds()] = uint64(l.buckets[i].Load())
	}
	return prometheus.MustNewConstHistogram(descLatency, uint64(l.count.Load()), time.Duration(l.sumNanos.Load()).Seconds(), buckets)
}

// gauges returns how many pods have a line, how many objects the API server holds, and
// the age at now of the oldest change not written yet (0: none).
func (b *book) gauges(now time.Time) (pods, objects int, oldest time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, r := range b.reports {
		for _, l := range r.lines {
			if len(l.entries) > 0 {
				pods++
			}
		}
		if r.exists {
			objects++
		}
		for _, c := range []change{r.pending, r.taken} {
			if !c.since.IsZero() {
				oldest = max(oldest, now.Sub(c.since))
			}
		}
	}
	return pods, objects, oldest
}

// refusals counts refused requests by status. The statuses are the few the agent answers,
// so the map stays small.
type refusals struct {
	mu     sync.Mutex
	counts map[int]int64 // guarded by mu
}

func (r *refusals) add(status int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.counts == nil {
		r.counts = map[int]int64{}
	}
	r.counts[status]++
}

func (r *refusals) byStatus() map[int]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[int]int64, len(r.counts))
	for code, n := range r.counts {
		out[code] = n
	}
	return out
}

func (r *refusals) total() int64 {
	var n int64
	for _, c := range r.byStatus() {
		n += c
	}
	return n
}
