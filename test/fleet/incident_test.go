package fleet

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
)

// verdictBreaker is the CircuitBreaker of the fleet incident: scope Fleet, quorum 0 (one
// pod's earned Open opens the fleet), open for verdictOpen: long enough that no pod's
// open period ends before every pod is counted, which would make "all counted open"
// unreachable (at N=5,000 per-pod reports took over 10 s to count on a loaded 2-core
// machine). Through node agents the writes grow with the nodes, not the pods, and
// 2 ms per pod leaves several times the time counting is meant to take.
const verdictBreaker = "verdict"

func (h *harness) verdictOpen() time.Duration {
	perPod := 10 * time.Millisecond
	if h.nodes > 0 {
		perPod = 2 * time.Millisecond
	}
	return 10*time.Second + time.Duration(len(h.pods))*perPod
}

// incidentQuiet is how long no counted write and nothing waiting in a pod or an agent
// (a change an agent holds, up to 3 s, docs/design.md §9, counts as busy) ends an
// incident, so that the writes the incident caused after all were counted are its own.
const incidentQuiet = 2 * time.Second

// incident is one fleet incident sample.
type incident struct {
	openCond, everyPod, counted time.Duration
	openOK, everyPodOK, countOK bool
	cbWrites, cmWrites, reports int64
	waits                       flowWaits
	cpu                         cpu // trip to all counted
	// From the trip until the incident's writes ended (incidentQuiet): CPU (the node
	// hosts' too), the API server's writes and how long it lasted.
	whole    cpu
	hostsCPU float64
	api      apiWrites
	lasted   time.Duration
	watches  watches // held as the incident began
	// sizes is what the node reports weigh as the incident's writes end.
	sizes   reportSizes
	partial string
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
	h.use(verdictBreaker)
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
	return h.incidentRows(samples)
}

func (h *harness) fleetIncident(c int) incident {
	n := int64(len(h.pods))
	var out incident
	before, api0, w0, cpu0, hosts0 := h.tr.snapshot(), h.apiWrites(), h.flowWaits(), h.cpu(), h.fleet.cpu()
	out.watches = h.watches()
	seq0 := h.tr.breaker(verdictBreaker).seq
	name := fmt.Sprintf("incident-%d", c+1)
	profiled := h.profile(name, 20*time.Second)
	defer profiled()
	start, _ := h.tripProfiled(verdictBreaker, 2, name)
	deadline := start.Add(h.s.waitCap)
	type reached struct {
		d  time.Duration
		ok bool
	}
	everyPod := make(chan reached, 1)
	go func() {
		d, ok := h.waitState(verdictBreaker, breaker.Open, start, deadline)
		everyPod <- reached{d, ok}
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
	e := <-everyPod
	out.everyPod, out.everyPodOK = e.d, e.ok
	out.cbWrites = got.seq - seq0
	// The incident ends when its last write has: before the open period does, when the
	// recovery's writes begin.
	h.tr.quiet(h.ctx, incidentQuiet, start.Add(h.verdictOpen()-time.Second), h.busy)
	out.lasted = time.Since(start)
	out.whole, out.hostsCPU, out.api = h.cpu().minus(cpu0), h.fleet.cpu()-hosts0, h.apiWrites().minus(api0)
	d := h.tr.snapshot().minus(before)
	out.cmWrites, out.reports = d[kindConfigMap], d[kindBreakerReport]+d[kindNodeBreakerReport]
	if h.nodes > 0 {
		var err error
		if out.sizes, err = h.nodeReportSizes(); err != nil {
			logf("fleet incident %d: node report sizes: %v", c+1, err)
		}
	}
	out.waits = h.flowWaits().minus(w0)
	if !out.openOK || !out.countOK || !out.everyPodOK {
		out.partial = fmt.Sprintf("open %d of %d, Open=%s", memberCount(orEmpty(got.obj), "open"), n, condition(orEmpty(got.obj), "Open"))
	}
	logf("fleet incident %d/%d: Open=True %s (%v), every pod %s (%v), all counted %s (%v), CB writes %d, CM writes %d; until quiet (%s): API server: %s; CPU %s; waits: %s; watches: %s",
		c+1, h.s.cycles, fmtDur(out.openCond), out.openOK, fmtDur(out.everyPod), out.everyPodOK, fmtDur(out.counted), out.countOK,
		out.cbWrites, out.cmWrites, fmtDur(out.lasted), out.api, out.whole, out.waits, out.watches)
	return out
}

// recoverFleet closes every pod again: after the open timeout, one successful probe on
// each.
func (h *harness) recoverFleet() {
	n := int64(len(h.pods))
	time.Sleep(h.verdictOpen() + 50*time.Millisecond)
	deadline := time.Now().Add(h.s.waitCap)
	if open := h.recoverPods(verdictBreaker, deadline); open > 0 {
		logf("fleet recovery: %d pods would not close within %s", open, h.s.waitCap)
	}
	if _, ok := h.tr.waitFor(h.ctx, verdictBreaker, time.Time{}, deadline, func(o *unstructured.Unstructured) bool {
		return memberCount(o, "closed") == n && condition(o, "Open") == "False"
	}); !ok {
		logf("fleet recovery: not all closed within %s", h.s.waitCap)
	}
}
