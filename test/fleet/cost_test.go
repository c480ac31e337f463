package fleet

import (
	"fmt"
	"math"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// What an incident costs, beside its writes: how long the API server's priority and
// fairness made requests wait, by priority level, and the CPU time of the API server and
// the operator, so that the machine's own limit shows apart from Fusebox's.

// waitHistogram is apiserver_flowcontrol_request_wait_duration_seconds of one priority
// level: cumulative bucket counts by upper bound, and the sum and count.
type waitHistogram struct {
	buckets    map[float64]float64
	sum, count float64
}

// flowWaits is that histogram by priority level.
type flowWaits map[string]*waitHistogram

func parseFlowWaits(body []byte) flowWaits {
	out := flowWaits{}
	get := func(level string) *waitHistogram {
		w := out[level]
		if w == nil {
			w = &waitHistogram{buckets: map[float64]float64{}}
			out[level] = w
		}
		return w
	}
	_ = samples(strings.NewReader(string(body)), func(name, labels string, v float64) {
		const base = "apiserver_flowcontrol_request_wait_duration_seconds"
		if !strings.HasPrefix(name, base) {
			return
		}
		w := get(label(labels, "priority_level"))
		switch name {
		case base + "_bucket":
			le, err := strconv.ParseFloat(label(labels, "le"), 64)
			if err != nil {
				le = math.Inf(1)
			}
			w.buckets[le] += v
		case base + "_sum":
			w.sum += v
		case base + "_count":
			w.count += v
		}
	})
	return out
}

func (a flowWaits) minus(b flowWaits) flowWaits {
	out := flowWaits{}
	for level, w := range a {
		o := b[level]
		d := &waitHistogram{buckets: map[float64]float64{}, sum: w.sum, count: w.count}
		for le, c := range w.buckets {
			d.buckets[le] = c
		}
		if o != nil {
			d.sum -= o.sum
			d.count -= o.count
			for le, c := range o.buckets {
				d.buckets[le] -= c
			}
		}
		if d.count > 0 {
			out[level] = d
		}
	}
	return out
}

// quantile is the upper bound of the bucket holding quantile q: the histogram cannot say
// better.
func (w *waitHistogram) quantile(q float64) float64 {
	les := make([]float64, 0, len(w.buckets))
	for le := range w.buckets {
		les = append(les, le)
	}
	sort.Float64s(les)
	for _, le := range les {
		if w.buckets[le] >= q*w.count {
			return le
		}
	}
	return math.Inf(1)
}

func fmtSeconds(s float64) string {
	if math.IsInf(s, 1) {
		return "> largest bucket"
	}
	return fmtDur(time.Duration(s * float64(time.Second)))
}

// String: "level ×count (mean, p99 ≤ bound)", the operator's level first.
func (a flowWaits) String() string {
	if len(a) == 0 {
		return "no request classified"
	}
	levels := make([]string, 0, len(a))
	for l := range a {
		levels = append(levels, l)
	}
	sort.Slice(levels, func(i, j int) bool {
		if (levels[i] == "operator") != (levels[j] == "operator") {
			return levels[i] == "operator"
		}
		return a[levels[i]].count > a[levels[j]].count
	})
	parts := make([]string, 0, len(levels))
	for _, l := range levels {
		w := a[l]
		parts = append(parts, fmt.Sprintf("%s ×%.0f (mean %s, p99 ≤ %s)", l, w.count, fmtSeconds(w.sum/w.count), fmtSeconds(w.quantile(0.99))))
	}
	return strings.Join(parts, ", ")
}

// flowWaits reads the API server's /metrics.
func (h *harness) flowWaits() flowWaits {
	body := h.apiServerMetrics()
	if body == nil {
		return nil
	}
	return parseFlowWaits(body)
}

// clockTicks is the unit of /proc/<pid>/stat's CPU times.
var clockTicks = func() float64 {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err != nil {
		return 100
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
	if err != nil || v <= 0 {
		return 100
	}
	return v
}()

// cpuSeconds is the user and system CPU time pid has used, from /proc/<pid>/stat.
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, field 2, may hold spaces: count fields after its ")".
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fields))
	}
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	return (utime + stime) / clockTicks, nil
}

// apiServerPID finds this harness's kube-apiserver among the machine's: the one
// serving the harness's port.
func (h *harness) apiServerPID() int {
	u, err := url.Parse(h.cfg.Host)
	if err != nil {
		return 0
	}
	want := "--secure-port=" + u.Port()
	dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, d := range dirs {
		b, err := os.ReadFile(d)
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) == 0 || filepath.Base(args[0]) != "kube-apiserver" {
			continue
		}
		for _, a := range args {
			if a == want {
				pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(d)))
				return pid
			}
		}
	}
	return 0
}

// cpu is the CPU time of the API server and the operator at one moment.
type cpu struct{ apiServer, operator float64 }

func (h *harness) cpu() cpu {
	var c cpu
	if h.apiPID == 0 {
		h.apiPID = h.apiServerPID()
	}
	if h.apiPID != 0 {
		c.apiServer, _ = cpuSeconds(h.apiPID)
	}
	if h.mgr != nil && h.mgr.cmd.Process != nil {
		c.operator, _ = cpuSeconds(h.mgr.cmd.Process.Pid)
	}
	return c
}

func (c cpu) minus(o cpu) cpu { return cpu{c.apiServer - o.apiServer, c.operator - o.operator} }

func (c cpu) String() string {
	return fmt.Sprintf("API server %.2f s, operator %.2f s", c.apiServer, c.operator)
}

// watches is what the API server says, in apiserver_longrunning_requests, of the watches
// it holds: per "resource (scope)", how many.
type watches map[string]float64

func parseWatches(body []byte) watches {
	out := watches{}
	_ = samples(strings.NewReader(string(body)), func(name, labels string, v float64) {
		if name != "apiserver_longrunning_requests" || label(labels, "verb") != "WATCH" || v == 0 {
			return
		}
		out[label(labels, "resource")+" ("+label(labels, "scope")+")"] += v
	})
	return out
}

// configMaps is the ConfigMap watches of a namespace or of a named ConfigMap (the
// pods' and the node agents' are field-selected on the name, which the API server counts
// as scope "resource").
func (w watches) configMaps() float64 {
	return w["configmaps (resource)"] + w["configmaps (namespace)"]
}

// config is the watches of the rendered ConfigMaps that pods or node agents hold: the
// ConfigMap watches more than before the agents started (base: the API server's own, the
// harness's; the operator's is cluster-wide).
func (w watches) config(base watches) float64 { return max(w.configMaps()-base.configMaps(), 0) }

func (w watches) total() float64 {
	var n float64
	for _, v := range w {
		n += v
	}
	return n
}

// String: "pods (cluster) 51, configmaps (resource) 51, ..., 38 others of one each",
// most first: the ConfigMap watches and every resource watched more than once.
func (w watches) String() string {
	keys := make([]string, 0, len(w))
	ones := 0
	for k, v := range w {
		if v > 1 || strings.HasPrefix(k, "configmaps ") {
			keys = append(keys, k)
		} else {
			ones++
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		if w[keys[i]] != w[keys[j]] {
			return w[keys[i]] > w[keys[j]]
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, 0, len(keys)+1)
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.0f", k, w[k]))
	}
	if ones > 0 {
		parts = append(parts, fmt.Sprintf("%d others of one each", ones))
	}
	return strings.Join(parts, ", ")
}

// watches reads the API server's /metrics.
func (h *harness) watches() watches {
	body := h.apiServerMetrics()
	if body == nil {
		return nil
	}
	return parseWatches(body)
}
