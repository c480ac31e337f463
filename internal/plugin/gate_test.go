package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/gate"
	"github.com/fusebox-dev/fusebox/internal/testutil"
)

// gateExit runs `kubectl fusebox gate args...` and returns what it printed and the exit
// code cmd/kubectl-fusebox would exit with.
func gateExit(t *testing.T, args ...string) (string, int) {
	t.Helper()
	out, errOut, err := kubectlFusebox(context.Background(), append([]string{"gate"}, args...)...)
	code, silent := ExitCode(err)
	if !silent {
		errOut += err.Error()
	}
	return out + errOut, code
}

// The plugin judges from the status the real operator wrote from pods' reports, and exits
// with the phase.
func TestGateJudgesFromStatusAndExitsWithThePhase(t *testing.T) {
	ns := newNamespace(t, "")
	createBreaker(t, ns, "payments", nil)
	createBreaker(t, ns, "search", nil)
	for _, p := range []struct{ name, revision string }{{"stable-0", "stable"}, {"stable-1", "stable"}, {"canary-0", "canary"}} {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: p.name, Labels: map[string]string{resiliencev1alpha1.LabelPodTemplateHash: p.revision}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
		}
		if err := k8sClient.Create(context.Background(), pod); err != nil {
			t.Fatal(err)
		}
	}
	report(t, ns, "stable-0", entry("payments", resiliencev1alpha1.StateClosed, "Started"), entry("search", resiliencev1alpha1.StateClosed, "Started"))
	report(t, ns, "stable-1", entry("payments", resiliencev1alpha1.StateClosed, "Started"), tripped("search"))
	report(t, ns, "canary-0", tripped("payments"), tripped("search"))

	testutil.Eventually(t, wait, "the canary's revision is Failed on payments", func() error {
		out, code := gateExit(t, "payments", "-n", ns, "--revision", "canary")
		if code != exitFailed || !strings.Contains(out, "Failed: revision canary is open") {
			return fmt.Errorf("exit %d: %s", code, out)
		}
		for _, want := range []string{"revision   canary     1      Open", "baseline   stable     2      Closed"} {
			if !strings.Contains(out, want) {
				return fmt.Errorf("no %q in\n%s", want, out)
			}
		}
		return nil
	})
	testutil.Eventually(t, wait, "both revisions are open on search: Inconclusive", func() error {
		out, code := gateExit(t, "search", "-n", ns, "--revision", "canary", "-o", "json")
		var j gate.Judgement
		if code != exitInconclusive || json.Unmarshal([]byte(out), &j) != nil || j.Phase != gate.PhaseInconclusive {
			return fmt.Errorf("exit %d: %s", code, out)
		}
		return nil
	})
	if out, code := gateExit(t, "payments", "-n", ns, "--revision", "stable"); code != 0 || !strings.Contains(out, "Successful: revision stable is closed") {
		t.Errorf("the stable revision against the canary: exit %d, %s", code, out)
	}
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"payments", "-n", ns}, "--revision is required"},
		{[]string{"payments", "-n", ns, "--revision", "canary", "--baseline", "canary"}, `--baseline "canary" is the revision judged`},
		{[]string{"absent", "-n", ns, "--revision", "canary"}, `circuitbreaker "absent" not found`},
		{[]string{"payments", "-A", "--revision", "canary"}, "-A/--all-namespaces does not go with a breaker's name"},
		{[]string{"payments", "-n", ns, "--revision", "canary", "-o", "wide"}, "want json or yaml"},
	} {
		if out, code := gateExit(t, tc.args...); code != exitNoJudgement || !strings.Contains(out, tc.says) {
			t.Errorf("gate %v: exit %d, %q; want %d saying %q", tc.args, code, out, exitNoJudgement, tc.says)
		}
	}
}
