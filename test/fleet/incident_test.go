package fleet

import (
	"context"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
)

// verdictBreaker is the CircuitBreaker of the fleet incident: scope Fleet, quorum 0 (one
// pod's earned Open opens the fleet), open for verdictOpen: long enough that no pod's
// open period ends before every pod is counted, which would make "all counted open"
// unreachable (at N=5,000 counting took over 10 s on a loaded 2-core machine).
const verdictBreaker = "verdict"

func (h *harness) verdictOpen() time.Duration {
	return 10*time.Second + time.Duration(len(h.pods))*10*time.Millisecond
}

// incident is one fleet incident sample.
type incident struct {
	openCond, everyPod, counted time.Duration
	openOK, everyPodOK, countOK bool
	cbWrites, cmWrites, reports int64
	waits                       flowWaits
	cpu                         cpu
	partial                     string
}

// fleetIncidents: every pod uses a Fleet-scope breaker; half the pods (every other one)
// trip at once, a storm of N/2 earned reports, and the fleet verdict has to reach the
// other half through the ConfigMap, which then adopt it (their Adopted reports are held,
// docs/semantics.md). Timed from the trip: Open=True on the CircuitBreaker, every pod's
// own breaker Open, every pod counted open. Then what it cost: CircuitBreaker and
// ConfigMap writes, reports written, the API server's flow-control wait by priority
// level, and CPU.
func (h *harness) fleetIncidents() []row {
	n := int64(len(h.pods))
	obj := breakerObject(verdictBreaker)
	_ = unstructured.SetNestedField(obj.Object, "Fleet", "spec", "scope")
	_ = unstructured.SetNestedField(obj.Object, h.verdictOpen().String(), "spec", "openTimeout")
	if _, err := h.dc.Resource(circuitBreakersGVR).Namespace(namespace).Create(h.ctx, obj, metav1.CreateOptions{}); err != nil {
		h.t.Fatal(err)
	}
	if err := h.waitPublished([]string{verdictBreaker}, time.Now().Add(h.s.waitCap)); err != nil {
		h.t.Fatalf("the operator did not publish %s: %v", verdictBreaker, err)
	}
	for _, p := range h.pods {
		p.breaker(verdictBreaker)
	}
	if _, ok := h.tr.waitFor(h.ctx, verdictBreaker, time.Time{}, time.Now().Add(h.s.waitCap), func(o *unstructured.Unstructured) bool {
		return memberCount(o, "closed") == n
	}); !ok {
		logf("fleet incident: not every pod reported the breaker closed within %s; measuring anyway", h.s.waitCap)
	}
	h.settle("adding the Fleet breaker")

	var samples []incident
	for c := range h.s.cycles {
		samples = append(samples, h.fleetIncident(c))
		h.recoverFleet()
		h.settle("a fleet incident")
	}
	var openCond, everyPod, counted []time.Duration
	var miss []string
	var cb, cm, reports, cpus, waits []string
	var opWait []time.Duration
	var api, op float64
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
		cpus = append(cpus, s.cpu.String())
		waits = append(waits, s.waits.String())
		api += s.cpu.apiServer
		op += s.cpu.operator
		if w := s.waits["operator"]; w != nil {
			opWait = append(opWait, time.Duration(w.quantile(0.99)*float64(time.Second)))
		}
	}
	k := len(samples)
	dist := func(ds []time.Duration) string {
		if len(ds) == 0 {
			return "not reached"
		}
		return fmt.Sprintf("p50 %s, p99 %s", fmtDur(percentile(ds, 0.5)), fmtDur(percentile(ds, 0.99)))
	}
	note := fmt.Sprintf("%d incidents (p99 of so few is their maximum)", k)
	if len(miss) > 0 {
		note += "; " + strings.Join(miss, "; ")
	}
	rows := []row{
		{
			scenario: "Fleet scope, half the pods trip at once → `Open=True`",
			target:   "p99 ≤ 1 s",
			measured: dist(openCond),
			meets:    yesNo(len(openCond) == k && percentile(openCond, 0.99) <= time.Second),
			notes:    note,
		},
		{
			scenario: "… → every pod's breaker is Open (the other half by the fleet verdict)",
			target:   "≤ 2 s",
			measured: dist(everyPod),
			meets:    yesNo(len(everyPod) == k && percentile(everyPod, 1) <= 2*time.Second),
			notes:    "polled in process every 5 ms",
		},
		{
			scenario: fmt.Sprintf("… → `memberCounts.open == %d` (all counted)", n),
			target:   "≤ 10 s at N=5,000",
			measured: dist(counted),
			meets:    yesNo(len(counted) == k && percentile(counted, 1) <= 10*time.Second),
			notes:    "CircuitBreaker writes per incident: " + strings.Join(cb, ", ") + "; ConfigMap writes: " + strings.Join(cm, ", ") + "; BreakerReport writes: " + strings.Join(reports, ", "),
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
			scenario: "… CPU per incident (`/proc/<pid>/stat`, trip to all counted)",
			target:   "reported",
			measured: fmt.Sprintf("API server %.2f s, operator %.2f s (mean)", api/float64(k), op/float64(k)),
			meets:    "—",
			notes:    strings.Join(cpus, "; "),
		},
	}
	return rows
}

func (h *harness) fleetIncident(c int) incident {
	n := int64(len(h.pods))
	var out incident
	brs := make([]*breaker.Breaker, len(h.pods))
	for i, p := range h.pods {
		brs[i] = p.breaker(verdictBreaker)
	}
	before, api0, w0, cpu0 := h.tr.snapshot(), h.apiWrites(), h.flowWaits(), h.cpu()
	seq0 := h.tr.breaker(verdictBreaker).seq
	profiled := h.profile(fmt.Sprintf("incident-%d", c+1), 20*time.Second)
	defer profiled()
	start := time.Now()
	for i := 0; i < len(brs); i += 2 {
		brs[i].Trip()
	}
	deadline := start.Add(h.s.waitCap)
	ctx, cancel := context.WithDeadline(h.ctx, deadline)
	defer cancel()
	everyPod := make(chan time.Duration, 1)
	go func() {
		for i := 0; i < len(brs); {
			if brs[i].State() == breaker.Open {
				i++
				continue
			}
			select {
			case <-ctx.Done():
				close(everyPod)
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
		everyPod <- time.Since(start)
	}()
	got, ok := h.tr.waitFor(h.ctx, verdictBreaker, start, deadline, func(o *unstructured.Unstructured) bool {
		return condition(o, "Open") == "True"
	})
	out.openCond, out.openOK = got.at.Sub(start), ok
	got, ok = h.tr.waitFor(h.ctx, verdictBreaker, start, deadline, func(o *unstructured.Unstructured) bool {
		return memberCount(o, "open") == n
	})
	out.counted, out.countOK = got.at.Sub(start), ok
	out.cpu = h.cpu().minus(cpu0)
	out.everyPod, out.everyPodOK = <-everyPod
	out.cbWrites = got.seq - seq0
	d := h.tr.snapshot().minus(before)
	out.cmWrites, out.reports = d[kindConfigMap], d[kindBreakerReport]
	out.waits = h.flowWaits().minus(w0)
	if !out.openOK || !out.countOK || !out.everyPodOK {
		out.partial = fmt.Sprintf("open %d of %d, Open=%s", memberCount(orEmpty(got.obj), "open"), n, condition(orEmpty(got.obj), "Open"))
	}
	logf("fleet incident %d/%d: Open=True %s (%v), every pod %s (%v), all counted %s (%v), CB writes %d, CM writes %d; API server: %s; waits: %s; CPU: %s",
		c+1, h.s.cycles, fmtDur(out.openCond), out.openOK, fmtDur(out.everyPod), out.everyPodOK, fmtDur(out.counted), out.countOK,
		out.cbWrites, out.cmWrites, h.apiWrites().minus(api0), out.waits, out.cpu)
	return out
}

// recoverFleet closes every pod again: after the open timeout, one successful probe on
// each.
func (h *harness) recoverFleet() {
	n := int64(len(h.pods))
	time.Sleep(h.verdictOpen() + 50*time.Millisecond)
	deadline := time.Now().Add(h.s.waitCap)
	for _, p := range h.pods {
		b := p.breaker(verdictBreaker)
		for b.Execute(h.ctx, func(context.Context) error { return nil }) != nil && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if _, ok := h.tr.waitFor(h.ctx, verdictBreaker, time.Time{}, deadline, func(o *unstructured.Unstructured) bool {
		return memberCount(o, "closed") == n && condition(o, "Open") == "False"
	}); !ok {
		logf("fleet recovery: not all closed within %s", h.s.waitCap)
	}
}
