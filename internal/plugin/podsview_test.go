package plugin

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// The pods table puts what a person looks for first: open, half-open, refusing the
// config, behind it, closed; the most recent first within each; then by name.
func TestPodsTableIsOpenFirst(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	line := func(pod, state string, ago time.Duration, edit func(*breakerconfig.ReportEntry)) PodLine {
		e := breakerconfig.ReportEntry{Name: "payments", State: state, Since: breakerconfig.NewTime(now.Add(-ago)), Reason: breakerconfig.ReasonStarted, ConfigGeneration: 4}
		if edit != nil {
			edit(&e)
		}
		return PodLine{Pod: pod, Node: "node-a", Via: ViaNodeAgent, Agent: "fusebox-node-a", Circuit: e}
	}
	tripped := func(e *breakerconfig.ReportEntry) {
		e.Reason, e.Calls, e.FailureRatePercent = breakerconfig.ReasonTripped, ptr.To[int64](40), ptr.To[int32](60)
	}
	lines := []PodLine{
		line("closed-old", breakerconfig.StateClosed, time.Hour, nil),
		line("behind", breakerconfig.StateClosed, time.Minute, func(e *breakerconfig.ReportEntry) { e.ConfigGeneration = 3 }),
		line("open-old", breakerconfig.StateOpen, 10*time.Minute, tripped),
		line("refusing", breakerconfig.StateClosed, 2*time.Hour, func(e *breakerconfig.ReportEntry) {
			e.ConfigError = "spec.window: must be between 1s and 1h, and this message is longer than a table cell should be"
		}),
		line("half-open", breakerconfig.StateHalfOpen, 2*time.Hour, nil),
		line("open-new", breakerconfig.StateOpen, 5*time.Second, tripped),
		line("closed-b", breakerconfig.StateClosed, time.Minute, nil),
		line("closed-a", breakerconfig.StateClosed, time.Minute, nil),
	}
	own := line("own", breakerconfig.StateClosed, 30*time.Second, nil)
	own.Via, own.Node, own.Agent = ViaBreakerReport, "", ""
	lines = append(lines, own)
	sortPods(lines, 4)
	var order []string
	for _, l := range lines {
		order = append(order, l.Pod)
	}
	if got, want := strings.Join(order, " "), "open-new open-old half-open refusing behind own closed-a closed-b closed-old"; got != want {
		t.Errorf("order:\n got %s\nwant %s", got, want)
	}

	v := &BreakerPods{Metadata: BreakerRef{Namespace: "shop", Name: "payments"}, Generation: 4, Pods: lines, Agents: 3,
		Unanswered: []UnansweredAgent{{Agent: "fusebox-node-b", Node: "node-b", Reason: "did not answer within 2s"}}}
	var out, errOut bytes.Buffer
	if err := writePods(&out, &errOut, v, now); err != nil {
		t.Fatal(err)
	}
	rows := strings.Split(out.String(), "\n")
	if got := strings.Join(strings.Fields(rows[0]), " "); got != "NODE POD REVISION STATE REASON SINCE CALLS FAILURE% CONFIG" {
		t.Errorf("header %q", got)
	}
	for _, want := range []struct{ pod, cells string }{
		{"open-new", "node-a open-new - Open Tripped 5s 40 60% 4"},
		{"behind", "node-a behind - Closed Started 60s - - 3 (latest 4)"},
		{"own", "(own report) own - Closed Started 30s - - 4"},
	} {
		if got := strings.Join(podRow(t, out.String(), want.pod), " "); got != want.cells {
			t.Errorf("%s: got %q, want %q", want.pod, got, want.cells)
		}
	}
	if refusing := podRow(t, out.String(), "refusing"); !strings.Contains(strings.Join(refusing, " "), "refused: spec.window: must be between 1s and 1h") ||
		!strings.HasSuffix(refusing[len(refusing)-1], "…") {
		t.Errorf("refusing: %q, want the refusal cut short", refusing)
	}
	if !strings.Contains(out.String(), "1 of 3 node agents did not answer") || !regexp.MustCompile(`node-b\s+fusebox-node-b\s+did not answer within 2s`).MatchString(out.String()) {
		t.Errorf("the agent that did not answer is not named:\n%s", out.String())
	}
	if errOut.Len() != 0 {
		t.Errorf("stderr: %q", errOut.String())
	}

	out.Reset()
	empty := &BreakerPods{Metadata: BreakerRef{Namespace: "shop", Name: "payments"}, Agents: 1}
	if err := writePods(&out, &errOut, empty, now); err != nil || out.Len() != 0 || !strings.Contains(errOut.String(), "No pod reports circuitbreaker payments in namespace shop") {
		t.Errorf("no pods: err %v, stdout %q, stderr %q", err, out.String(), errOut.String())
	}
}

// podRow finds the pods table's line of pod: its POD cell follows NODE, which is one
// word, or three for a pod reporting on its own on a node ("node-a (own report)").
func podRow(t *testing.T, out, pod string) []string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		for _, at := range []int{1, 2, 3} {
			if len(f) > at && f[at] == pod && (at == 1 || strings.HasSuffix(f[at-1], "report)")) {
				return f
			}
		}
	}
	t.Fatalf("no line of pod %s in:\n%s", pod, out)
	return nil
}
