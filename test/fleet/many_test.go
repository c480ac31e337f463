package fleet

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// manyBreakers adds CircuitBreakers up to FLEET_BREAKERS, has every pod use
// them all, and reads the operator's heap once they are all reported.
func (h *harness) manyBreakers() []row {
	n, b := h.s.pods, h.s.breakers
	names := []string{mainBreaker}
	for i := 1; i < b; i++ {
		names = append(names, fmt.Sprintf("%s-%d", mainBreaker, i))
	}
	r := row{
		scenario: fmt.Sprintf("operator heap at N=%d × %d breakers (`go_memstats_heap_inuse_bytes`)", n, b),
		target:   "reported; ≤ 256 MiB",
	}
	for _, name := range names[1:] {
		if err := h.createBreaker(name); err != nil {
			r.measured = "error: " + err.Error()
			return []row{r}
		}
	}
	if err := h.waitPublished(names, time.Now().Add(h.s.waitCap)); err != nil {
		r.measured = "not published: " + err.Error()
		return []row{r}
	}
	h.resetPhasePeak()
	api0 := h.apiWrites()
	start := time.Now()
	h.use(names...)
	deadline := start.Add(h.s.waitCap)
	var behind []string
	for _, name := range names {
		got, ok := h.tr.waitFor(h.ctx, name, time.Time{}, deadline, func(o *unstructured.Unstructured) bool {
			return memberCount(o, "reporting") == int64(n)
		})
		if !ok {
			behind = append(behind, fmt.Sprintf("%s %d", name, memberCount(orEmpty(got.obj), "reporting")))
		}
	}
	reportedIn := time.Since(start)
	note := h.settle("adding breakers")
	m, err := h.mgr.scrape(h.ctx)
	runPeak, phasePeak := h.peaks()
	if err != nil {
		r.measured = "error: " + err.Error()
		return []row{r}
	}
	phasePeak = max(phasePeak, m.heapInuse)
	r.measured = fmt.Sprintf("%s after, peak %s", mib(m.heapInuse), mib(phasePeak))
	r.meets = yesNo(phasePeak <= 256<<20)
	if len(behind) == 0 {
		r.notes = fmt.Sprintf("every pod reported all %d breakers %s after using them", b, fmtDur(reportedIn))
	} else {
		r.notes = fmt.Sprintf("> %s, not every pod reported: reporting %s", fmtDur(h.s.waitCap), strings.Join(behind, ", "))
	}
	r.notes += fmt.Sprintf("; heap_alloc %s; %s; peak of the whole run %s; API server: %s", mib(m.heapAlloc), note, mib(runPeak), h.apiWrites().minus(api0))
	logf("heap: %s (%s)", r.measured, r.notes)
	return []row{r}
}

func orEmpty(o *unstructured.Unstructured) *unstructured.Unstructured {
	if o == nil {
		return &unstructured.Unstructured{Object: map[string]any{}}
	}
	return o
}
