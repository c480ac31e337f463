package nodeagent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// The agent's cost per request, and the three ways it could check a token, measured side
// by side in one run (docs/benchmarks.md, "Node agent"):
//
//	KUBEBUILDER_ASSETS="$(hack/envtest.sh)" go test -run '^$' -bench . -benchmem -count 5 ./internal/nodeagent

// cpuMeter reports, besides the wall-clock ns/op that the machine's other load inflates,
// the CPU time per op of this process (agent and client) and of the API server, read
// from /proc: what a request costs, and what it costs the API server every tenant
// shares.
type cpuMeter struct {
	self, api time.Duration
	apiPID    int
}

func startCPU(b *testing.B) *cpuMeter {
	b.Helper()
	m := &cpuMeter{apiPID: apiServerPID(b)}
	m.self, m.api = procCPU(b, os.Getpid()), procCPU(b, m.apiPID)
	return m
}

func (m *cpuMeter) report(b *testing.B) {
	n := float64(b.N)
	b.ReportMetric(float64((procCPU(b, os.Getpid())-m.self).Microseconds())/n, "cpu-µs/op")
	b.ReportMetric(float64((procCPU(b, m.apiPID)-m.api).Microseconds())/n, "apiserver-cpu-µs/op")
}

// apiServerPID finds the suite's kube-apiserver: the one whose command line names the
// suite's certificate directory.
func apiServerPID(b *testing.B) int {
	b.Helper()
	dirs, err := os.ReadDir("/proc")
	must(b, err)
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmd, []byte("kube-apiserver")) && bytes.Contains(cmd, []byte(certDir)) {
			return pid
		}
	}
	b.Fatal("the suite's kube-apiserver is not among the processes")
	return 0
}

// procCPU is a process's user and system CPU time so far, from /proc/PID/stat (in clock
// ticks of 10 ms: enough over the thousands of ops of a benchmark).
func procCPU(b *testing.B, pid int) time.Duration {
	b.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	must(b, err)
	// The command name, in parentheses, may hold spaces: the fields follow its end.
	fields := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+2:]))
	utime, err := strconv.ParseInt(fields[11], 10, 64)
	must(b, err)
	stime, err := strconv.ParseInt(fields[12], 10, 64)
	must(b, err)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// benchAgent is one agent with one pod of its node, whose token it already knows.
func benchAgent(b *testing.B) (*runningAgent, string) {
	b.Helper()
	node := newNode(b)
	ns := newNamespace(b)
	a := startAgent(b, node, agentOptions{})
	pod := newPod(b, ns, "bench", node.Name)
	token := podToken(b, pod, breakerconfig.NodeAgentAudience)
	if status, body := putReport(b, a, token, started); status != http.StatusOK {
		b.Fatalf("%d %s", status, body)
	}
	return a, token
}

// BenchmarkReportPUT: one PUT /v1/report of a pod whose token the agent knows (the cached
// check, the pod looked up in the cache, the body read and checked, the line compared):
// over loopback HTTP with keep-alive as a pod sends it, and at the handler alone. The
// report is the same each time (a resend, which writes nothing) or changes each time
// (each change is written later, on the writer's pace: not on the request's path).
func BenchmarkReportPUT(b *testing.B) {
	a, token := benchAgent(b)
	one, _ := json.Marshal(breakerconfig.AgentReport{Breakers: []breakerconfig.ReportEntry{started}})
	other, _ := json.Marshal(breakerconfig.AgentReport{Breakers: []breakerconfig.ReportEntry{tripped}})
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	overHTTP := func(b *testing.B, bodies ...[]byte) {
		m := startCPU(b)
		defer m.report(b)
		for i := 0; b.Loop(); i++ {
			req, _ := http.NewRequest(http.MethodPut, a.url+breakerconfig.AgentReportPath, bytes.NewReader(bodies[i%len(bodies)]))
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := hc.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Fatalf("status %d", resp.StatusCode)
			}
		}
	}
	h := a.handler()
	atHandler := func(b *testing.B, bodies ...[]byte) {
		m := startCPU(b)
		defer m.report(b)
		for i := 0; b.Loop(); i++ {
			req := httptest.NewRequest(http.MethodPut, breakerconfig.AgentReportPath, bytes.NewReader(bodies[i%len(bodies)]))
			req.Header.Set("Authorization", "Bearer "+token)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != http.StatusOK {
				b.Fatalf("status %d: %s", w.Code, w.Body)
			}
		}
	}
	b.Run("http/resend", func(b *testing.B) { overHTTP(b, one) })
	b.Run("http/change", func(b *testing.B) { overHTTP(b, one, other) })
	b.Run("handler/resend", func(b *testing.B) { atHandler(b, one) })
	b.Run("handler/change", func(b *testing.B) { atHandler(b, one, other) })
}

// BenchmarkTokenCheck: what believing a pod's token costs the agent: the answer kept
// from its first check (every later request), a TokenReview round trip to the API server
// (envtest's, on loopback: a real cluster's is further away, and each one is API server
// work; what the agent does when it cannot check a token itself), and checking it against
// the issuer's keys (ES256 here, from /openid/v1/jwks), as the agent checks a pod's
// token first (issuerKeys.verify).
func BenchmarkTokenCheck(b *testing.B) {
	a, token := benchAgent(b)
	ctx := context.Background()
	header := "Bearer " + token
	b.Run("cached", func(b *testing.B) {
		m := startCPU(b)
		defer m.report(b)
		for b.Loop() {
			if _, err := a.auth.authenticate(ctx, header, true); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The agent's own client paces its requests (50 a second); the round trip is
	// measured without that, as the API server's cost.
	c := agentIdentity(nodeOf(b, a))
	c.QPS = -1
	reviews, err := kubernetes.NewForConfig(c)
	must(b, err)
	b.Run("tokenreview", func(b *testing.B) {
		m := startCPU(b)
		defer m.report(b)
		for b.Loop() {
			r, err := reviews.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{
				Token: token, Audiences: []string{breakerconfig.NodeAgentAudience},
			}}, metav1.CreateOptions{})
			if err != nil || !r.Status.Authenticated {
				b.Fatalf("%v %+v", err, r)
			}
		}
	})
	b.Run("jwt-verify", func(b *testing.B) {
		keys := newIssuerKeys(func(ctx context.Context, path string) ([]byte, error) {
			return clientset.CoreV1().RESTClient().Get().AbsPath(path).DoRaw(ctx)
		})
		m := startCPU(b)
		defer m.report(b)
		for b.Loop() {
			if _, ok := keys.verify(token, time.Now()); !ok {
				b.Fatal("the pod's token does not verify against its issuer's keys")
			}
		}
	})
}

// nodeOf returns the Node of a running agent.
func nodeOf(b *testing.B, a *runningAgent) *corev1.Node {
	b.Helper()
	n, err := clientset.CoreV1().Nodes().Get(context.Background(), a.node, metav1.GetOptions{})
	must(b, err)
	return n
}
