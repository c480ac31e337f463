package fleet

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// row is one line of the results table.
type row struct {
	scenario, target, measured, meets, notes string
}

func yesNo(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}

// TestFleet is `make bench-fleet`. See the package documentation.
func TestFleet(t *testing.T) {
	if os.Getenv("FLEET_BENCH") != "1" {
		t.Skip("SKIPPED — FLEET BENCHMARK NOT RUN: it starts an API server, the manager binary and " +
			"500 in-process pods for up to half an hour. Run it with `make bench-fleet` " +
			"(FLEET_BENCH=1; FLEET_PODS=100 for a smaller fleet).")
	}
	s, err := loadSettings()
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, s)
	var rows []row
	defer func() { h.report(rows) }()

	rows = append(rows, h.startFleet()...)
	h.heapProfiles("start")
	if s.runs("steady") {
		rows = append(rows, h.steadyState())
	}
	if s.runs("spec") {
		rows = append(rows, h.specChanges())
	}
	if s.runs("trip") {
		rows = append(rows, h.tripCycles()...)
	}
	if s.runs("incident") {
		rows = append(rows, h.fleetIncidents()...)
		h.heapProfiles("incidents")
	}
	if s.runs("many") {
		rows = append(rows, h.manyBreakers()...)
	}
	if s.runs("bystanders") {
		rows = append(rows, h.bystanders()...)
	}
	if s.runs("restart") && s.restartBreakers > 0 {
		rows = append(rows, h.restartAtScale()...)
	}
}

// startFleet creates the pods and the breaker, then starts every agent at
// once and times them until the CircuitBreaker counts them all.
func (h *harness) startFleet() []row {
	n := h.s.pods
	logf("creating %d pods", n)
	t0 := time.Now()
	h.createPods(n)
	logf("%d pods created in %s", n, fmtDur(time.Since(t0)))
	if err := h.createBreaker(mainBreaker); err != nil {
		h.t.Fatal(err)
	}
	if err := h.waitPublished([]string{mainBreaker}, time.Now().Add(h.s.waitCap)); err != nil {
		h.t.Fatalf("the operator did not publish %s: %v", mainBreaker, err)
	}
	h.settle("creating the breaker")

	before, api0 := h.tr.snapshot(), h.apiWrites()
	logf("starting %d agents", n)
	start := time.Now()
	h.startAgents(mainBreaker)
	startedIn := time.Since(start)
	got, ok := h.tr.waitFor(h.ctx, mainBreaker, start, start.Add(h.s.waitCap), func(o *unstructured.Unstructured) bool {
		return memberCount(o, "reporting") == int64(n)
	})
	r := row{scenario: fmt.Sprintf("%d starting pods → `memberCounts.reporting == %d`", n, n), target: "reported", meets: "—"}
	if ok {
		r.measured = fmtDur(got.at.Sub(start))
	} else {
		r.measured = fmt.Sprintf("> %s, not reached (reporting %d)", fmtDur(h.s.waitCap), memberCount(orEmpty(got.obj), "reporting"))
	}
	writes := h.tr.snapshot().minus(before)
	r.notes = fmt.Sprintf("agents started in %s; writes until then: %s; API server: %s", fmtDur(startedIn), writes, h.apiWrites().minus(api0))
	switch st := h.fleet.stats(); {
	case h.s.hollow:
		r.notes += fmt.Sprintf("; hollow agents: %d synthetic reports taken, %d refused, %d node report writes; before it: %s",
			st.Reports, st.ReportFailures, st.AgentWrites, strings.Join(h.nodeNotes, "; "))
	case h.nodes > 0:
		r.notes += fmt.Sprintf("; node agents: %d tokens verified against the issuer's keys, %d TokenReviews, %d pods read live, %d requests refused; before it: %s",
			st.TokensVerified, st.TokenReviews, st.LiveLookups, st.Refused, strings.Join(h.nodeNotes, "; "))
	}
	logf("start: %s (%s)", r.measured, r.notes)
	return []row{r}
}

// podSideWrites says what the pods (and in node mode their agents) sent between two
// stats.
func (h *harness) podSideWrites(a, b HostStats) string {
	if h.nodes == 0 {
		return fmt.Sprintf("pod-side writes %d", b.APIWrites-a.APIWrites)
	}
	return fmt.Sprintf("pods' reports to their agents %d, node agents' writes %d", b.Reports-a.Reports, b.AgentWrites-a.AgentWrites)
}

// steadyState counts every write while nothing happens.
func (h *harness) steadyState() row {
	note := h.settle("the start")
	before, st0 := h.tr.snapshot(), h.fleet.stats()
	logf("steady state: watching for %s", h.s.steady)
	select {
	case <-time.After(h.s.steady):
	case <-h.ctx.Done():
	}
	d, st := h.tr.snapshot().minus(before), h.fleet.stats()
	r := row{
		scenario: fmt.Sprintf("steady state, %s with nothing happening: writes (%s)", fmtDur(h.s.steady), strings.Join(h.kinds, ", ")),
		target:   "0",
		measured: fmt.Sprint(d.total()),
		meets:    yesNo(d.total() == 0),
		notes:    fmt.Sprintf("%s; %s; before it: %s", d, h.podSideWrites(st0, st), note),
	}
	logf("steady: %s (%s)", r.measured, r.notes)
	return r
}

// specChanges changes failureRatePercent and times, per pod, until its breaker
// runs the new policy.
func (h *harness) specChanges() row {
	n := h.s.pods
	var perPod, all []time.Duration
	missed, reached := 0, 0
	current := int64(50)
	var lastWrites counts
	for i := range h.s.specSamples {
		percent := int64(20 + (i*13)%60)
		if percent == current {
			percent++
		}
		current = percent
		want := float64(percent) / 100
		before := h.tr.snapshot()
		start := time.Now()
		if err := h.patchSpec(mainBreaker, fmt.Sprintf(`{"spec":{"failureRatePercent":%d}}`, percent)); err != nil {
			h.t.Fatal(err)
		}
		times, left := h.waitPolicy(mainBreaker, want, start, start.Add(h.s.waitCap))
		perPod = append(perPod, times...)
		if left == 0 {
			reached++
			all = append(all, time.Since(start))
		}
		missed += left
		logf("spec change %d/%d (failureRatePercent %d): %d of %d pods in %s", i+1, h.s.specSamples, percent, n-left, n, fmtDur(time.Since(start)))
		h.settle("a spec change")
		lastWrites = h.tr.snapshot().minus(before)
	}
	r := row{
		scenario: "spec change (`failureRatePercent`) → every pod's breaker `Policy()` shows it",
		target:   "p99 ≤ 2 s at N=500",
	}
	p99 := percentile(perPod, 0.99)
	r.measured = fmt.Sprintf("per pod p50 %s, p99 %s", fmtDur(percentile(perPod, 0.5)), fmtDur(p99))
	if missed > 0 {
		r.measured += fmt.Sprintf("; %d pod-samples > %s, not reached", missed, fmtDur(h.s.waitCap))
	}
	r.meets = yesNo(missed == 0 && p99 <= 2*time.Second)
	r.notes = fmt.Sprintf("%d changes × %d pods; all pods: p50 %s, max %s (%d of %d changes reached every pod); writes per change incl. the pods' reports (last one): %s",
		h.s.specSamples, n, fmtDur(percentile(all, 0.5)), fmtDur(percentile(all, 1)), reached, h.s.specSamples, lastWrites)
	return r
}

// cycle is one trip/recover sample.
type cycle struct {
	openCond, allOpen, recovered        time.Duration
	openCondOK, allOpenOK, recoveredOK  bool
	burstWrites, recoverWrites          int64
	size, managedSize, managers         int
	operatorRequests, operatorConflicts float64
	tripSpread, closeSpread             time.Duration
	partialOpen, partialClosed          string
	apiBurst, apiRecovery               apiWrites
}

// tripCycles trips every pod's breaker at once, times the CircuitBreaker's
// Open condition and its open count, then lets the open timeout pass, closes
// every pod with a successful probe and times the count back to all closed.
func (h *harness) tripCycles() []row {
	n := int64(h.s.pods)
	var cycles []cycle
	for c := range h.s.cycles {
		if s := h.tr.breaker(mainBreaker); s.obj == nil || memberCount(s.obj, "closed") != n || condition(s.obj, "Open") != "False" {
			logf("cycle %d: waiting for the breaker to be all closed first (%s)", c+1, describe(orEmpty(s.obj)))
			if _, ok := h.tr.waitFor(h.ctx, mainBreaker, time.Time{}, time.Now().Add(h.s.waitCap), func(o *unstructured.Unstructured) bool {
				return memberCount(o, "closed") == n && condition(o, "Open") == "False"
			}); !ok {
				logf("cycle %d: not all closed within %s; measuring anyway", c+1, h.s.waitCap)
			}
		}
		cycles = append(cycles, h.tripCycle(c))
		h.settle("a trip/recover cycle")
	}

	var openCond, allOpen, recovered []time.Duration
	var missOpen, missAll, missRec int
	var maxWrites int64
	var writes, recWrites, sizes, requests []string
	maxSize, maxManaged, managers := 0, 0, 0
	for _, c := range cycles {
		if c.openCondOK {
			openCond = append(openCond, c.openCond)
		} else {
			missOpen++
		}
		if c.allOpenOK {
			allOpen = append(allOpen, c.allOpen)
		} else {
			missAll++
		}
		if c.recoveredOK {
			recovered = append(recovered, c.recovered)
		} else {
			missRec++
		}
		maxWrites = max(maxWrites, c.burstWrites)
		writes = append(writes, fmt.Sprint(c.burstWrites))
		recWrites = append(recWrites, fmt.Sprint(c.recoverWrites))
		sizes = append(sizes, kib(c.size))
		requests = append(requests, fmt.Sprintf("%.0f (409: %.0f)", c.operatorRequests, c.operatorConflicts))
		if c.size > maxSize {
			maxSize, maxManaged, managers = c.size, c.managedSize, c.managers
		}
	}
	k := len(cycles)
	dist := func(ds []time.Duration, miss int, partial func(cycle) string) string {
		out := "—"
		if len(ds) > 0 {
			out = fmt.Sprintf("p50 %s, p99 %s", fmtDur(percentile(ds, 0.5)), fmtDur(percentile(ds, 0.99)))
		}
		if miss > 0 {
			var parts []string
			for _, c := range cycles {
				if p := partial(c); p != "" {
					parts = append(parts, p)
				}
			}
			out += fmt.Sprintf("; %d of %d > %s, not reached (%s)", miss, k, fmtDur(h.s.waitCap), strings.Join(parts, "; "))
		}
		return out
	}
	samples := fmt.Sprintf("%d cycles (p99 of so few samples is their maximum)", k)
	var spreads []string
	for _, c := range cycles {
		spreads = append(spreads, fmtDur(c.tripSpread))
	}
	rows := []row{
		{
			scenario: "every pod trips at once → `Open=True` on the CircuitBreaker",
			target:   "p99 ≤ 1 s",
			measured: dist(openCond, missOpen, func(c cycle) string {
				if c.openCondOK {
					return ""
				}
				return c.partialOpen
			}),
			meets: yesNo(missOpen == 0 && percentile(openCond, 0.99) <= time.Second),
			notes: samples + "; all Trip() calls within " + strings.Join(spreads, ", "),
		},
		{
			scenario: fmt.Sprintf("every pod trips at once → `memberCounts.open == %d`", n),
			target:   "≤ 5 s at N=500",
			measured: dist(allOpen, missAll, func(c cycle) string {
				if c.allOpenOK {
					return ""
				}
				return c.partialOpen
			}),
			meets: yesNo(missAll == 0 && percentile(allOpen, 1) <= 5*time.Second),
			notes: samples,
		},
		{
			scenario: "CircuitBreaker writes (watch events on it) during that burst",
			target:   "≤ 20, whatever N",
			measured: fmt.Sprintf("max %d", maxWrites),
			meets:    yesNo(maxWrites <= 20 && missAll == 0),
			notes: "per cycle, until open == N or the cap: " + strings.Join(writes, ", ") + "; operator API requests during the burst: " + strings.Join(requests, ", ") +
				"; API server, last burst: " + cycles[k-1].apiBurst.String(),
		},
		{
			scenario: "CircuitBreaker size, managedFields included (GET as JSON) after the burst",
			target:   "≤ 64 KiB",
			measured: kib(maxSize),
			meets:    yesNo(maxSize > 0 && maxSize <= 64<<10),
			notes:    fmt.Sprintf("managedFields %s in %d entries; per cycle: %s", kib(maxManaged), managers, strings.Join(sizes, ", ")),
		},
		{
			scenario: fmt.Sprintf("recovery: every pod closes again → `memberCounts.closed == %d` and `Open=False`", n),
			target:   "reported",
			measured: dist(recovered, missRec, func(c cycle) string {
				if c.recoveredOK {
					return ""
				}
				return c.partialClosed
			}),
			meets: "—",
			notes: samples + "; timed from the first probe, after openTimeout 1 s; CircuitBreaker writes: " + strings.Join(recWrites, ", ") +
				"; API server, last recovery: " + cycles[k-1].apiRecovery.String(),
		},
	}
	return rows
}

func (h *harness) tripCycle(c int) cycle {
	n := int64(h.s.pods)
	var out cycle
	seq0 := h.tr.breaker(mainBreaker).seq
	m0, _ := h.mgr.scrape(h.ctx)
	api0 := h.apiWrites()

	start, spread := h.trip(mainBreaker, 1)
	out.tripSpread = spread
	tripped := start.Add(out.tripSpread)
	deadline := start.Add(h.s.waitCap)

	got, ok := h.tr.waitFor(h.ctx, mainBreaker, start, deadline, func(o *unstructured.Unstructured) bool {
		return condition(o, "Open") == "True"
	})
	out.openCond, out.openCondOK = got.at.Sub(start), ok
	got, ok = h.tr.waitFor(h.ctx, mainBreaker, start, deadline, func(o *unstructured.Unstructured) bool {
		return memberCount(o, "open") == n
	})
	out.allOpen, out.allOpenOK = got.at.Sub(start), ok
	out.burstWrites = got.seq - seq0
	if !ok {
		out.partialOpen = fmt.Sprintf("open %d of %d, Open=%s", memberCount(orEmpty(got.obj), "open"), n, condition(orEmpty(got.obj), "Open"))
	}
	out.apiBurst = h.apiWrites().minus(api0)
	if m1, err := h.mgr.scrape(h.ctx); err == nil {
		out.operatorRequests, out.operatorConflicts = m1.requests-m0.requests, m1.conflicts-m0.conflicts
	}
	var err error
	if out.size, out.managedSize, out.managers, err = h.objectSize(mainBreaker); err != nil {
		logf("cycle %d: size: %v", c+1, err)
	}
	logf("cycle %d/%d trip: Open=True %s (%v), open==%d %s (%v), %d CircuitBreaker writes, %s",
		c+1, h.s.cycles, fmtDur(out.openCond), out.openCondOK, n, fmtDur(out.allOpen), out.allOpenOK, out.burstWrites, kib(out.size))

	// Recovery: once the open timeout (1 s) has passed, one successful probe
	// closes each pod's circuit (successThreshold 1).
	if wait := time.Until(tripped.Add(time.Second + 50*time.Millisecond)); wait > 0 {
		time.Sleep(wait)
	}
	seq1 := h.tr.breaker(mainBreaker).seq
	api1 := h.apiWrites()
	rstart := time.Now()
	rdeadline := rstart.Add(h.s.waitCap)
	stillOpen := h.recoverPods(mainBreaker, rdeadline)
	out.closeSpread = time.Since(rstart)
	got, ok = h.tr.waitFor(h.ctx, mainBreaker, rstart, rdeadline, func(o *unstructured.Unstructured) bool {
		return memberCount(o, "closed") == n && condition(o, "Open") == "False"
	})
	out.recovered, out.recoveredOK = got.at.Sub(rstart), ok && stillOpen == 0
	out.recoverWrites = got.seq - seq1
	out.apiRecovery = h.apiWrites().minus(api1)
	if !out.recoveredOK {
		out.partialClosed = fmt.Sprintf("closed %d of %d, Open=%s, %d pods would not close locally",
			memberCount(orEmpty(got.obj), "closed"), n, condition(orEmpty(got.obj), "Open"), stillOpen)
	}
	if out.recoveredOK {
		logf("cycle %d/%d recovery: %s (probes took %s), %d CircuitBreaker writes",
			c+1, h.s.cycles, fmtDur(out.recovered), fmtDur(out.closeSpread), out.recoverWrites)
	} else {
		logf("cycle %d/%d recovery: not reached (%s)", c+1, h.s.cycles, out.partialClosed)
	}
	return out
}
