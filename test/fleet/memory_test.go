package fleet

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Memory: the peak resident set of the API server, the operator and the processes the
// pods run in, from each process's own high-water mark (VmHWM in /proc/<pid>/status),
// read every second so that a process that ends (the manager restarted, the run
// aborted) keeps its peak.

// rssPeaks is the largest VmHWM seen per process, in bytes.
type rssPeaks struct {
	apiServer, operator float64
	hosts               map[int]float64 // by pid
}

// peakRSS is pid's VmHWM, in bytes.
func peakRSS(pid int) (float64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:")
		if !ok {
			continue
		}
		kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/status: VmHWM %q", pid, rest)
		}
		return kb * 1024, nil
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmHWM", pid)
}

// sampleRSS reads every process's VmHWM and keeps the largest.
func (h *harness) sampleRSS() {
	api, _ := peakRSS(h.apiPID)
	var op float64
	if h.mgr != nil && h.mgr.cmd.Process != nil {
		op, _ = peakRSS(h.mgr.cmd.Process.Pid)
	}
	hosts := map[int]float64{}
	for _, pid := range h.hostPIDs {
		hosts[pid], _ = peakRSS(pid)
	}
	h.heapMu.Lock()
	defer h.heapMu.Unlock()
	h.rss.apiServer, h.rss.operator = max(h.rss.apiServer, api), max(h.rss.operator, op)
	if h.rss.hosts == nil {
		h.rss.hosts = map[int]float64{}
	}
	for pid, v := range hosts {
		h.rss.hosts[pid] = max(h.rss.hosts[pid], v)
	}
}

// memoryRow is the run's peak resident memory, by process.
func (h *harness) memoryRow() row {
	h.sampleRSS()
	h.heapMu.Lock()
	rss, heap := h.rss, h.heapPeak
	h.heapMu.Unlock()
	var most, sum float64
	for _, v := range rss.hosts {
		most, sum = max(most, v), sum+v
	}
	pods := "this process (the harness and its in-process pods)"
	switch {
	case h.s.hollow:
		pods = fmt.Sprintf("%d node host processes (%d hollow agents, %d synthetic pods): largest %s, together %s", len(rss.hosts), h.nodes, len(h.pods), mib(most), mib(sum))
	case h.nodes > 0:
		pods = fmt.Sprintf("%d node host processes (%d node agents and %d pods): largest %s, together %s", len(rss.hosts), h.nodes, len(h.pods), mib(most), mib(sum))
	default:
		pods += " " + mib(most)
	}
	operator := mib(rss.operator)
	if h.s.managerMemory > 0 {
		operator += fmt.Sprintf(" (limit %s, FLEET_MANAGER_MEMORY)", mib(float64(h.s.managerMemory)))
	}
	return row{
		scenario: "peak resident memory over the run (`VmHWM`, /proc/<pid>/status, read every second)",
		target:   "reported",
		measured: fmt.Sprintf("API server %s, operator %s", mib(rss.apiServer), operator),
		meets:    "—",
		notes:    fmt.Sprintf("%s; the operator's heap (`go_memstats_heap_inuse_bytes`) peaked at %s", pods, mib(heap)),
	}
}
