package fleet

import (
	"fmt"
	"strings"
	"time"
)

// The fleet incident's rows and their targets (issue 28's for the node agents; the
// per-pod design's as before).

// incidentTargets are the bounds an incident is judged by at this run's size and mode.
type incidentTargets struct {
	open, counted  time.Duration
	openT, countT  string
	apiCPU         float64 // CPU-s of the API server per incident; 0: only reported
	writesPerNode  float64 // report writes per node per incident; 0: only reported
	watchesPerNode float64 // config watches per node; 0: only reported
}

func (h *harness) incidentTargets() incidentTargets {
	n := len(h.pods)
	switch {
	case h.nodes > 0 && n <= 5000:
		return incidentTargets{open: time.Second, openT: "p99 ≤ 1 s", counted: 5 * time.Second, countT: "≤ 5 s",
			apiCPU: 2, writesPerNode: 2, watchesPerNode: 2}
	case h.nodes > 0:
		return incidentTargets{open: 2 * time.Second, openT: "p99 ≤ 2 s (aim)", counted: 10 * time.Second, countT: "≤ 10 s (aim)",
			apiCPU: 2, writesPerNode: 2, watchesPerNode: 2}
	case n <= 500:
		return incidentTargets{open: time.Second, openT: "p99 ≤ 1 s", counted: 10 * time.Second, countT: "≤ 10 s at N=5,000"}
	}
	return incidentTargets{open: 1500 * time.Millisecond, openT: "p99 ≤ 1.5 s at N=2,000", counted: 10 * time.Second, countT: "≤ 10 s at N=5,000"}
}

// reportWrites sums an incident's writes of pods' and of nodes' reports, as the API
// server counted them (every write verb, whatever its answer).
func reportWrites(a apiWrites) (pods, nodes, failed float64) {
	for k, w := range a {
		_, res, _ := strings.Cut(k, " ")
		switch res {
		case breakerReportsGVR.Resource:
			pods += w.count
		case nodeBreakerReportsGVR.Resource:
			nodes += w.count
		default:
			continue
		}
		failed += w.failed
	}
	return pods, nodes, failed
}

func (h *harness) incidentRows(samples []incident) []row {
	n := int64(len(h.pods))
	t := h.incidentTargets()
	var openCond, everyPod, counted []time.Duration
	var miss, cb, cm, reports, cpus, waits, writes, held, sizes []string
	var largest reportSizes
	var opWait []time.Duration
	var api, op, apiAll, opAll, hosts, maxPerNode, maxPodWrites, maxConfig, maxWatches float64
	for i, s := range samples {
		if s.openOK {
			openCond = append(openCond, s.openCond)
		}
		if s.everyPodOK {
			everyPod = append(everyPod, s.everyPod)
		}
		if s.countOK {
			counted = append(counted, s.counted)
		}
		if !s.openOK || !s.everyPodOK || !s.countOK {
			miss = append(miss, fmt.Sprintf("incident %d: %s", i+1, s.partial))
		}
		cb = append(cb, fmt.Sprint(s.cbWrites))
		cm = append(cm, fmt.Sprint(s.cmWrites))
		reports = append(reports, fmt.Sprint(s.reports))
		c := fmt.Sprintf("%s until all counted; %s until quiet after %s", s.cpu, s.whole, fmtDur(s.lasted))
		if h.nodes > 0 {
			c += fmt.Sprintf(", node hosts %.2f s", s.hostsCPU)
		}
		cpus = append(cpus, c)
		waits = append(waits, s.waits.String())
		api += s.cpu.apiServer
		op += s.cpu.operator
		apiAll += s.whole.apiServer
		opAll += s.whole.operator
		hosts += s.hostsCPU
		if w := s.waits["operator"]; w != nil {
			opWait = append(opWait, time.Duration(w.quantile(0.99)*float64(time.Second)))
		}
		podW, nodeW, failed := reportWrites(s.api)
		maxPodWrites = max(maxPodWrites, podW)
		if h.nodes > 0 {
			maxPerNode = max(maxPerNode, nodeW/float64(h.nodes))
		}
		writes = append(writes, fmt.Sprintf("node reports %.0f, pod reports %.0f (%.0f not 2xx)", nodeW, podW, failed))
		maxConfig, maxWatches = max(maxConfig, s.watches.config(h.watches0)), max(maxWatches, s.watches.total())
		held = append(held, s.watches.String())
		sizes = append(sizes, s.sizes.String())
		if s.sizes.largest >= largest.largest {
			largest = s.sizes
		}
	}
	k := len(samples)
	kf := float64(k)
	dist := func(ds []time.Duration) string {
		if len(ds) == 0 {
			return "not reached"
		}
		return fmt.Sprintf("p50 %s, p99 %s", fmtDur(percentile(ds, 0.5)), fmtDur(percentile(ds, 0.99)))
	}
	note := fmt.Sprintf("%d incidents (p99 of so few is their maximum)", k)
	if h.nodes > 0 {
		note += fmt.Sprintf("; %d pods on %d nodes", n, h.nodes)
	}
	if len(miss) > 0 {
		note += "; " + strings.Join(miss, "; ")
	}
	perNode := func(v float64) string {
		if h.nodes == 0 {
			return ""
		}
		return fmt.Sprintf(" (%.2f per node)", v/float64(h.nodes))
	}
	judged := func(bound, v float64) string {
		if bound == 0 {
			return "—"
		}
		return yesNo(k > 0 && v <= bound)
	}
	target := func(bound float64, what string) string {
		if bound == 0 {
			return "reported"
		}
		return fmt.Sprintf("≤ %g %s", bound, what)
	}
	writesMeasured := fmt.Sprintf("pod reports max %.0f", maxPodWrites)
	if h.nodes > 0 {
		writesMeasured = fmt.Sprintf("max %.2f per node; pod reports max %.0f", maxPerNode, maxPodWrites)
	}
	rows := []row{
		{
			scenario: "Fleet scope, half the pods trip at once → `Open=True`" + h.onNodes(),
			target:   t.openT,
			measured: dist(openCond),
			meets:    yesNo(len(openCond) == k && percentile(openCond, 0.99) <= t.open),
			notes:    note,
		},
		{
			scenario: "… → every pod's breaker is Open (the other half by the fleet verdict)",
			target:   "≤ 2 s",
			measured: dist(everyPod),
			meets:    yesNo(len(everyPod) == k && percentile(everyPod, 1) <= 2*time.Second),
			notes:    h.everyPodNote(),
		},
		{
			scenario: fmt.Sprintf("… → `memberCounts.open == %d` (all counted)", n),
			target:   t.countT,
			measured: dist(counted),
			meets:    yesNo(len(counted) == k && percentile(counted, 1) <= t.counted),
			notes:    "CircuitBreaker writes per incident: " + strings.Join(cb, ", ") + "; ConfigMap writes: " + strings.Join(cm, ", ") + "; report writes (watch events): " + strings.Join(reports, ", "),
		},
		{
			scenario: "… report writes per incident, trip to quiet (API server `apiserver_request_total`)",
			target:   target(t.writesPerNode, "per node"),
			measured: writesMeasured,
			meets:    judged(t.writesPerNode, maxPerNode),
			notes:    strings.Join(writes, "; "),
		},
	}
	if h.nodes > 0 {
		rows = append(rows, row{
			scenario: "… node report size, managedFields included (listed as JSON), as the incident's writes end",
			target:   "reported (about 2 KiB at 100 pods × 2 breakers, docs/design.md §9)",
			measured: largest.String(),
			meets:    "—",
			notes:    fmt.Sprintf("%d pods per node; per incident: %s", len(h.pods)/h.nodes, strings.Join(sizes, "; ")),
		})
	}
	rows = append(rows, []row{
		{
			scenario: "… API server watches as the incident begins (`apiserver_longrunning_requests`, verb WATCH)",
			target:   target(t.watchesPerNode, "config watches per node"),
			measured: fmt.Sprintf("config watches (pods' or agents') %.0f%s; all watches %.0f", maxConfig, perNode(maxConfig), maxWatches),
			meets:    judged(t.watchesPerNode, maxConfig/float64(max(h.nodes, 1))),
			notes:    h.watchesNote() + "config watches: the ConfigMap watches less those held before any pod or agent ran (" + h.watches0.String() + "); held as each incident began, by resource (scope): " + strings.Join(held, " / "),
		},
		{
			scenario: "… the operator's flow-control wait (API server `apiserver_flowcontrol_request_wait_duration_seconds`, level `operator`)",
			target:   "p99 ≤ 50 ms",
			measured: func() string {
				if len(opWait) == 0 {
					return "no request of the operator's classified"
				}
				return "p99 ≤ " + fmtDur(percentile(opWait, 1))
			}(),
			meets: yesNo(len(opWait) == k && percentile(opWait, 1) <= 50*time.Millisecond),
			notes: "bucket bounds, per incident, every level: " + strings.Join(waits, " / "),
		},
		{
			scenario: "… CPU per incident (`/proc/<pid>/stat`), trip to quiet",
			target:   target(t.apiCPU, "CPU-s of the API server"),
			measured: fmt.Sprintf("API server %.2f s, operator %.2f s (mean)", apiAll/kf, opAll/kf),
			meets:    judged(t.apiCPU, maxOf(samples, func(s incident) float64 { return s.whole.apiServer })),
			notes: fmt.Sprintf("trip to all counted: API server %.2f s, operator %.2f s (mean)%s; per incident: %s",
				api/kf, op/kf, h.hostsNote(hosts/kf), strings.Join(cpus, "; ")),
		},
	}...)
	return rows
}

// everyPodNote says how "every pod's breaker is Open" was seen.
func (h *harness) everyPodNote() string {
	if h.s.hollow {
		return "hollow pods: when the last node host had applied the verdict to all of its synthetic pods (one config watch per host process: the fan-out to the nodes is not simulated)"
	}
	return "polled in process every 5 ms"
}

// watchesNote says whose config watches a hollow run holds.
func (h *harness) watchesNote() string {
	if h.s.hollow {
		return fmt.Sprintf("hollow: one per node host process (%d), not per node; ", len(h.fleet))
	}
	return ""
}

// onNodes names the node count in a scenario, in node mode.
func (h *harness) onNodes() string {
	switch {
	case h.s.hollow:
		return fmt.Sprintf(" (%d synthetic pods on %d nodes, through hollow node agents)", len(h.pods), h.nodes)
	case h.nodes > 0:
		return fmt.Sprintf(" (%d pods on %d nodes, through node agents)", len(h.pods), h.nodes)
	}
	return ""
}

func (h *harness) hostsNote(mean float64) string {
	if h.nodes == 0 {
		return ""
	}
	return fmt.Sprintf("; node hosts (agents and pods) %.2f s to quiet (mean)", mean)
}

func maxOf(samples []incident, f func(incident) float64) float64 {
	var m float64
	for _, s := range samples {
		m = max(m, f(s))
	}
	return m
}
