package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// What the harness measures besides the scenarios' own timings: the machine's memory,
// the manager's heap, the CircuitBreaker's size and the API server's own metrics.

// guardMemory stops the run, the API server first, when the machine runs low
// on memory: at N=500 on a design where every pod writes one object, the
// envtest API server grew past 23 GB (docs/benchmarks.md), and the machine is
// shared.
func (h *harness) guardMemory() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-h.ctx.Done():
			return
		case <-t.C:
		}
		avail, total, ok := meminfo()
		if !ok || avail >= max(2<<30, total/10) {
			continue
		}
		reason := fmt.Sprintf("the machine has %s of %s memory available", mib(float64(avail)), mib(float64(total)))
		logf("ABORTING: %s; stopping the agents, the manager and the API server", reason)
		h.abortMu.Lock()
		h.aborted = reason
		h.abortMu.Unlock()
		h.close()
		return
	}
}

func (h *harness) abortReason() string {
	h.abortMu.Lock()
	defer h.abortMu.Unlock()
	return h.aborted
}

// meminfo returns MemAvailable and MemTotal from /proc/meminfo, in bytes.
func meminfo() (avail, total uint64, ok bool) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		var kb uint64
		if _, err := fmt.Sscan(f[1], &kb); err != nil {
			continue
		}
		switch f[0] {
		case "MemAvailable:":
			avail = kb << 10
		case "MemTotal:":
			total = kb << 10
		}
	}
	return avail, total, avail > 0 && total > 0
}

// sampleHeap reads the manager's heap, and every process's peak resident memory, every
// second, keeping the peaks.
func (h *harness) sampleHeap() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-h.ctx.Done():
			return
		case <-t.C:
		}
		m, err := h.mgr.scrape(h.ctx)
		h.sampleRSS()
		h.heapMu.Lock()
		if err != nil {
			h.heapErr = err
		} else {
			h.heapPeak = max(h.heapPeak, m.heapInuse)
			h.phasePeak = max(h.phasePeak, m.heapInuse)
		}
		h.heapMu.Unlock()
	}
}

func (h *harness) resetPhasePeak() {
	h.heapMu.Lock()
	defer h.heapMu.Unlock()
	h.phasePeak = 0
}

func (h *harness) peaks() (run, phase float64) {
	h.heapMu.Lock()
	defer h.heapMu.Unlock()
	return h.heapPeak, h.phasePeak
}

// objectSize GETs the CircuitBreaker as JSON, managedFields included, and
// returns its size and the size of its managedFields alone.
func (h *harness) objectSize(name string) (total, managed, managers int, err error) {
	u := strings.TrimRight(h.cfg.Host, "/") + fmt.Sprintf("/apis/%s/namespaces/%s/%s/%s",
		circuitBreakersGVR.GroupVersion().String(), namespace, circuitBreakersGVR.Resource, name)
	ctx, cancel := context.WithTimeout(h.ctx, 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, 0, 0, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := h.hc.Do(req)
	if err != nil {
		return 0, 0, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, 0, 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, 0, 0, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	var obj struct {
		Metadata struct {
			ManagedFields []json.RawMessage `json:"managedFields"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(body, &obj); err != nil {
		return 0, 0, 0, err
	}
	mf, _ := json.Marshal(obj.Metadata.ManagedFields)
	return len(body), len(mf), len(obj.Metadata.ManagedFields), nil
}

// reportSizes is what the node reports of the namespace weigh as the API server serves
// them (JSON, managedFields included): the largest, its managedFields, the median, and
// how many there are.
type reportSizes struct{ largest, managed, median, count int }

func (r reportSizes) String() string {
	if r.count == 0 {
		return "no node report"
	}
	return fmt.Sprintf("largest %s (managedFields %s), median %s of %d", kib(r.largest), kib(r.managed), kib(r.median), r.count)
}

// nodeReportSizes lists the namespace's NodeBreakerReports as JSON and weighs each item.
func (h *harness) nodeReportSizes() (reportSizes, error) {
	u := strings.TrimRight(h.cfg.Host, "/") + fmt.Sprintf("/apis/%s/namespaces/%s/%s",
		nodeBreakerReportsGVR.GroupVersion().String(), namespace, nodeBreakerReportsGVR.Resource)
	body, err := get(h.ctx, h.hc, u, time.Minute)
	if err != nil {
		return reportSizes{}, err
	}
	var list struct {
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return reportSizes{}, err
	}
	var out reportSizes
	sizes := make([]int, 0, len(list.Items))
	for _, raw := range list.Items {
		sizes = append(sizes, len(raw))
		if len(raw) <= out.largest {
			continue
		}
		var obj struct {
			Metadata struct {
				ManagedFields json.RawMessage `json:"managedFields"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(raw, &obj); err != nil {
			return reportSizes{}, err
		}
		out.largest, out.managed = len(raw), len(obj.Metadata.ManagedFields)
	}
	if out.count = len(sizes); out.count > 0 {
		slices.Sort(sizes)
		out.median = sizes[(len(sizes)-1)/2]
	}
	return out, nil
}

// apiWrites reads the API server's own /metrics: the writes to the counted
// kinds so far, with their server-side latency.
func (h *harness) apiWrites() apiWrites {
	resources := map[string]bool{circuitBreakersGVR.Resource: true, configMapsGVR.Resource: true}
	if slices.Contains(h.kinds, kindBreakerReport) {
		resources[breakerReportsGVR.Resource] = true
	}
	if slices.Contains(h.kinds, kindNodeBreakerReport) {
		resources[nodeBreakerReportsGVR.Resource] = true
	}
	body := h.apiServerMetrics()
	if body == nil {
		return nil
	}
	w, err := parseAPIWrites(bytes.NewReader(body), resources)
	if err != nil {
		logf("API server metrics: %v", err)
	}
	return w
}

// apiServerMetrics is the API server's /metrics text, or nil (logged) when it cannot be read.
func (h *harness) apiServerMetrics() []byte {
	body, err := get(h.ctx, h.hc, strings.TrimRight(h.cfg.Host, "/")+"/metrics", 15*time.Second)
	if err != nil {
		logf("API server metrics: %v", err)
		return nil
	}
	return body
}

// get is the body of a GET of url that answers 200 within timeout.
func get(ctx context.Context, client *http.Client, url string, timeout time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return io.ReadAll(resp.Body)
}

// profile starts a CPU profile of d of the API server and of the operator and returns
// a function that waits for both and writes them to the FLEET_PROFILE directory as
// name-apiserver.pprof and name-operator.pprof. Without that directory it does nothing.
// The profiles say where an incident's CPU seconds go (serving applies, admission,
// watch fan-out, decoding, aggregating).
func (h *harness) profile(name string, d time.Duration) (wait func()) {
	return h.saveProfiles(fmt.Sprintf("/profile?seconds=%d", int(d.Seconds())), name, "pprof", d+30*time.Second)
}

// heapProfiles writes the heap profiles of the API server and of the operator, taken after
// a collection, to the FLEET_PROFILE directory as name-apiserver.heap and
// name-operator.heap: what each holds live, and what it allocated since it started.
// Without that directory it does nothing.
func (h *harness) heapProfiles(name string) {
	h.saveProfiles("/heap?gc=1", name, "heap", time.Minute)()
}

// saveProfiles asks the API server and the operator for the pprof profile at query (a
// path under /debug/pprof, with its parameters), both at once, and returns a function
// that waits for both and writes them to the FLEET_PROFILE directory as
// name-apiserver.ext and name-operator.ext. Without that directory it does nothing.
func (h *harness) saveProfiles(query, name, ext string, timeout time.Duration) (wait func()) {
	if h.s.profile == "" {
		return func() {}
	}
	var wg sync.WaitGroup
	get := func(client *http.Client, url, file string) {
		defer wg.Done()
		path := filepath.Join(h.s.profile, file)
		if err := saveProfile(h.ctx, client, url+query, path, timeout); err != nil {
			logf("profile %s: %v", file, err)
			return
		}
		logf("profile: %s", path)
	}
	wg.Add(1)
	go get(h.hc, strings.TrimRight(h.cfg.Host, "/")+"/debug/pprof", name+"-apiserver."+ext)
	if h.mgr != nil && h.mgr.pprofURL != "" {
		wg.Add(1)
		go get(http.DefaultClient, h.mgr.pprofURL, name+"-operator."+ext)
	}
	return wg.Wait
}

func saveProfile(ctx context.Context, client *http.Client, url, path string, timeout time.Duration) error {
	body, err := get(ctx, client, url, timeout)
	if err != nil {
		return err
	}
	return os.WriteFile(path, body, 0o644)
}
