package fleet

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func errorf(format string, a ...any) error { return fmt.Errorf(format, a...) }

// buildManager builds cmd/manager into dir, as `make build` does.
func buildManager(repoRoot, dir string) (string, error) {
	bin := filepath.Join(dir, "manager")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/manager")
	cmd.Dir = repoRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/manager: %v\n%s", err, out)
	}
	return bin, nil
}

// manager is the operator, the real binary, run as a separate process.
type manager struct {
	cmd        *exec.Cmd
	args       []string
	metricsURL string
	pprofURL   string // "" when the binary has no --pprof-bind-address
	exited     chan struct{}
	waitErr    error
	log        *os.File
}

// managerFlags returns the flags `manager --help` lists.
func managerFlags(bin string) (map[string]bool, error) {
	out, err := exec.Command(bin, "--help").CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		return nil, fmt.Errorf("%s --help: %w", bin, err)
	}
	flags := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "-") {
			continue
		}
		name := strings.TrimLeft(strings.Fields(line)[0], "-")
		name, _, _ = strings.Cut(name, "=")
		flags[name] = true
	}
	if len(flags) == 0 {
		return nil, fmt.Errorf("%s --help lists no flags:\n%s", bin, out)
	}
	return flags, nil
}

// freePort returns a port nobody listens on at the moment.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startManager runs the manager binary against the cluster of kubeconfig, with
// webhooks off, no leader election, and metrics and probes on local ports; it
// returns once /readyz answers.
func startManager(bin, kubeconfig, logPath string, memory int64) (*manager, error) {
	flags, err := managerFlags(bin)
	if err != nil {
		return nil, err
	}
	for _, f := range []string{"metrics-bind-address", "health-probe-bind-address"} {
		if !flags[f] {
			return nil, fmt.Errorf("manager --help lists no --%s; the harness needs it", f)
		}
	}
	metricsPort, err := freePort()
	if err != nil {
		return nil, err
	}
	probePort, err := freePort()
	if err != nil {
		return nil, err
	}
	args := []string{
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(metricsPort),
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(probePort),
	}
	if flags["leader-elect"] {
		args = append(args, "--leader-elect=false")
	}
	pprofURL := ""
	if flags["pprof-bind-address"] {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		args = append(args, "--pprof-bind-address=127.0.0.1:"+strconv.Itoa(port))
		pprofURL = fmt.Sprintf("http://127.0.0.1:%d/debug/pprof", port)
	}
	if flags["gate-bind-address"] {
		// A port of its own: the default (8444) is make run's, and a run beside one
		// would take it from the other.
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		args = append(args, "--gate-bind-address=127.0.0.1:"+strconv.Itoa(port))
	}
	if flags["webhook-cert-mode"] {
		// The harness installs no webhook configurations: the API server would
		// call nobody, and the manager needs no certificate.
		args = append(args, "--webhook-cert-mode=off")
	}
	if flags["operator-namespace"] {
		// Where the node agents' pods are, when the run has them (FLEET_NODES).
		args = append(args, "--operator-namespace="+operatorNamespace)
	}
	if flags["metrics-secure"] {
		args = append(args, "--metrics-secure=false")
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	var cg *memoryCgroup
	name, argv := bin, args
	if memory > 0 {
		if cg, err = newMemoryCgroup(fmt.Sprintf("fusebox-fleet-manager-%d", os.Getpid()), memory); err != nil {
			logf.Close()
			return nil, err
		}
		name, argv = cg.wrap(bin, args)
	}
	cmd := exec.Command(name, argv...)
	// Not in a cluster: no in-cluster defaults (leader election) from the
	// harness's own environment, and the kubeconfig of the envtest server.
	env := []string{"KUBECONFIG=" + kubeconfig}
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "KUBERNETES_SERVICE_") && !strings.HasPrefix(e, "KUBECONFIG=") {
			env = append(env, e)
		}
	}
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		if cg != nil {
			_ = cg.remove()
		}
		return nil, fmt.Errorf("start manager: %w", err)
	}
	m := &manager{cmd: cmd, args: args, metricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort), pprofURL: pprofURL, exited: make(chan struct{}), log: logf}
	go func() {
		m.waitErr = cmd.Wait()
		if cg != nil {
			if err := cg.remove(); err != nil {
				m.waitErr = errors.Join(m.waitErr, fmt.Errorf("remove the manager's memory cgroup: %w", err))
			}
		}
		close(m.exited)
	}()
	readyz := fmt.Sprintf("http://127.0.0.1:%d/readyz", probePort)
	deadline := time.Now().Add(time.Minute)
	for {
		select {
		case <-m.exited:
			return nil, fmt.Errorf("manager exited at start (%v); log: %s\n%s", m.waitErr, logPath, tail(logPath, 30))
		default:
		}
		if resp, err := http.Get(readyz); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return m, nil
			}
		}
		if time.Now().After(deadline) {
			m.stop()
			return nil, fmt.Errorf("manager not ready within a minute; log: %s\n%s", logPath, tail(logPath, 30))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// alive reports whether the manager process still runs.
func (m *manager) alive() bool {
	select {
	case <-m.exited:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM, as the kubelet would, and kills it after 15 s.
func (m *manager) stop() {
	if m.alive() {
		_ = m.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-m.exited:
		case <-time.After(15 * time.Second):
			_ = m.cmd.Process.Kill()
			<-m.exited
		}
	}
	m.log.Close()
}

// metrics is what the harness reads of the manager's /metrics.
type metrics struct {
	heapInuse, heapAlloc float64
	// requests is rest_client_requests_total summed over every label: the API
	// requests the operator has made; conflicts is those answered 409.
	requests, conflicts float64
}

func (m *manager) scrape(ctx context.Context) (metrics, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.metricsURL, nil)
	if err != nil {
		return metrics{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return metrics{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return metrics{}, fmt.Errorf("GET %s: %s", m.metricsURL, resp.Status)
	}
	return parseMetrics(resp.Body)
}

// samples calls f with every sample of the Prometheus text format in r.
func samples(r io.Reader, f func(name, labels string, v float64)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, labels, rest := line, "", ""
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name, rest = line[:i], line[i:]
			if line[i] == '{' {
				j := strings.LastIndexByte(line, '}')
				if j < i {
					continue
				}
				labels, rest = line[i+1:j], line[j+1:]
			}
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue
		}
		f(name, labels, v)
	}
	return sc.Err()
}

// label returns the value of label key in a sample's labels.
func label(labels, key string) string {
	for _, kv := range strings.Split(labels, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if ok && strings.TrimSpace(k) == key {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}

// parseMetrics reads the few samples it needs of the manager's metrics.
func parseMetrics(r io.Reader) (metrics, error) {
	var out metrics
	seen := false
	err := samples(r, func(name, labels string, v float64) {
		switch name {
		case "go_memstats_heap_inuse_bytes":
			out.heapInuse, seen = v, true
		case "go_memstats_heap_alloc_bytes":
			out.heapAlloc = v
		case "rest_client_requests_total":
			out.requests += v
			if label(labels, "code") == "409" {
				out.conflicts += v
			}
		}
	})
	if err != nil {
		return out, err
	}
	if !seen {
		return out, errors.New("no go_memstats_heap_inuse_bytes in the manager's /metrics")
	}
	return out, nil
}

// apiWrites is what the API server says, in its own /metrics, of the writes
// to the counted kinds: per "VERB resource[/subresource]", how many requests,
// their total latency, and how many were not answered 2xx.
type apiWrites map[string]apiWrite

type apiWrite struct{ count, seconds, failed float64 }

// writeVerbs are the verbs of apiserver_request_* that write.
var writeVerbs = map[string]bool{"APPLY": true, "PATCH": true, "POST": true, "PUT": true, "DELETE": true, "DELETECOLLECTION": true}

func parseAPIWrites(r io.Reader, resources map[string]bool) (apiWrites, error) {
	out := apiWrites{}
	err := samples(r, func(name, labels string, v float64) {
		if name != "apiserver_request_duration_seconds_sum" && name != "apiserver_request_duration_seconds_count" && name != "apiserver_request_total" {
			return
		}
		res, verb := label(labels, "resource"), label(labels, "verb")
		if !resources[res] || !writeVerbs[verb] {
			return
		}
		key := verb + " " + res
		if sub := label(labels, "subresource"); sub != "" {
			key += "/" + sub
		}
		w := out[key]
		switch name {
		case "apiserver_request_duration_seconds_sum":
			w.seconds += v
		case "apiserver_request_duration_seconds_count":
			w.count += v
		default:
			if !strings.HasPrefix(label(labels, "code"), "2") {
				w.failed += v
			}
		}
		out[key] = w
	})
	return out, err
}

func (a apiWrites) minus(b apiWrites) apiWrites {
	out := apiWrites{}
	for k, w := range a {
		o := b[k]
		if d := (apiWrite{w.count - o.count, w.seconds - o.seconds, w.failed - o.failed}); d.count > 0 || d.failed > 0 {
			out[k] = d
		}
	}
	return out
}

// String lists the writes, most requests first: "APPLY circuitbreakers/status
// ×350 (mean 8.6s, 20 failed)".
func (a apiWrites) String() string {
	if len(a) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(a))
	for k := range a {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if a[keys[i]].count != a[keys[j]].count {
			return a[keys[i]].count > a[keys[j]].count
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		w := a[k]
		s := fmt.Sprintf("%s ×%.0f", k, w.count)
		if w.count > 0 {
			s += fmt.Sprintf(" (mean %s", fmtDur(time.Duration(w.seconds/w.count*float64(time.Second))))
			if w.failed > 0 {
				s += fmt.Sprintf(", %.0f not 2xx", w.failed)
			}
			s += ")"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

func tail(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}
