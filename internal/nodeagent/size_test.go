package nodeagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	testingclock "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// maxNodeReportSize is what docs/design.md §9 promises a node report of 100 pods and two
// breakers weighs as stored: its size grows with breakers and revisions, never with pods.
const maxNodeReportSize = 4 << 10

// TestIncidentOfAHundredPods: a node of 100 pods in one namespace, each running two
// breakers, all of them tripping one in an incident and then holding the fleet's verdict.
// The node's object stays within maxNodeReportSize as the API server stores it
// (managedFields and all) at every step, and the incident costs it two writes: the
// evidence, then the echoes. The agent's pacing runs on a fake clock the test moves, so
// the count does not depend on how fast this machine sends 100 reports.
func TestIncidentOfAHundredPods(t *testing.T) {
	t.Parallel()
	node := newNode(t)
	ns := newNamespace(t)
	clk := testingclock.NewFakeClock(time.Now())
	agent := startAgent(t, node, agentOptions{clock: clk})
	const pods = 100
	tokens := make([]string, pods)
	parallel(t, pods, func(i int) {
		p := newPod(t, ns, fmt.Sprintf("checkout-7d9f8c6b5-%05d", i), node.Name, "pod-template-hash", "7d9f8c6b5")
		tokens[i] = podToken(t, p, breakerconfig.NodeAgentAudience)
	})

	start := clk.Now().UTC().Truncate(time.Millisecond)
	closed := func(name string, calls int64) breakerconfig.ReportEntry {
		rate := int32(2)
		return breakerconfig.ReportEntry{Name: name, State: breakerconfig.StateClosed, Reason: breakerconfig.ReasonStarted,
			Since: breakerconfig.NewTime(start.Add(-time.Hour)), Calls: &calls, FailureRatePercent: &rate, ConfigGeneration: 3}
	}
	open := func(i int, since time.Time) breakerconfig.ReportEntry {
		calls, rate, timeout := int64(40+i%7), int32(75), breakerconfig.Duration(30*time.Second)
		return breakerconfig.ReportEntry{Name: "payments", State: breakerconfig.StateOpen, Reason: breakerconfig.ReasonTripped,
			Since: breakerconfig.NewTime(since), Calls: &calls, FailureRatePercent: &rate, Trigger: breakerconfig.TriggerFailureRate,
			ConsecutiveOpens: 1, OpenTimeout: &timeout, ConfigGeneration: 3}
	}
	report := func(what string, entries func(i int) []breakerconfig.ReportEntry) {
		t.Helper()
		parallel(t, pods, func(i int) {
			if status, body := putReport(t, agent, tokens[i], entries(i)...); status != http.StatusOK {
				t.Errorf("%s, pod %d: %d %s", what, i, status, body)
			}
		})
	}
	largest := 0
	settle := func(what string, d time.Duration, check func(e *resiliencev1alpha1.NodeBreakerEntry) error) {
		t.Helper()
		clk.Step(d)
		eventually(t, what, func() error {
			clk.Step(0) // a timer the writer set after the step fires
			if !agent.Written() {
				return errors.New("changes still pending")
			}
			return check(entryOf(nodeReport(t, ns, node.Name), "payments", "7d9f8c6b5"))
		})
		size := storedSize(t, ns, node.Name)
		largest = max(largest, size)
		t.Logf("%s: the node's object of %d pods × 2 breakers is %d bytes as stored", what, pods, size)
	}

	report("first reports", func(i int) []breakerconfig.ReportEntry {
		return []breakerconfig.ReportEntry{closed("payments", 120), closed("search", 300)}
	})
	settle("first reports written", defaultPacing.hold, func(e *resiliencev1alpha1.NodeBreakerEntry) error {
		if e == nil || e.Pods != pods || e.Closed != pods {
			return fmt.Errorf("payments: %+v", e)
		}
		return nil
	})
	before := agent.writes.writesTo(ns)
	clk.Step(time.Minute) // a quiet spell

	// The evidence: every pod trips, within moments of each other.
	report("trips", func(i int) []breakerconfig.ReportEntry {
		return []breakerconfig.ReportEntry{open(i, start.Add(time.Duration(i)*time.Millisecond)), closed("search", 300)}
	})
	settle("the evidence written", defaultPacing.gather, func(e *resiliencev1alpha1.NodeBreakerEntry) error {
		if e == nil || e.EarnedOpen != pods || len(e.Notable) != resiliencev1alpha1.MaxNotablePods {
			return fmt.Errorf("payments: %+v", e)
		}
		return nil
	})
	// The echoes: the fleet's verdict re-times every pod's open period to its own.
	verdict := start.Add(2 * time.Second)
	report("echoes", func(i int) []breakerconfig.ReportEntry {
		return []breakerconfig.ReportEntry{open(i, verdict), closed("search", 300)}
	})
	settle("the echoes written", defaultPacing.hold, func(e *resiliencev1alpha1.NodeBreakerEntry) error {
		if e == nil || e.OpenSince == nil || !e.OpenSince.Time.Equal(verdict) {
			return fmt.Errorf("payments: %+v", e)
		}
		return nil
	})

	if n := agent.writes.writesTo(ns) - before; n > 2 {
		t.Errorf("an incident of %d pods cost their node's object %d writes, want at most 2: the evidence, then the echoes", pods, n)
	}
	if largest > maxNodeReportSize {
		t.Errorf("the node's object of %d pods × 2 breakers reached %d bytes as stored, over %d", pods, largest, maxNodeReportSize)
	}
}

// storedSize is the size of the node's object in ns as the API server returns it, as JSON:
// metadata, managedFields and all.
func storedSize(t *testing.T, ns, node string) int {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(resiliencev1alpha1.GroupVersion.WithKind(breakerconfig.NodeReportKind))
	must(t, k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: node}, u))
	if len(u.GetManagedFields()) == 0 {
		t.Fatal("the stored object has no managedFields: its size would be understated")
	}
	raw, err := json.Marshal(u.Object)
	must(t, err)
	return len(raw)
}

// parallel runs f(0..n-1), ten at a time.
func parallel(t *testing.T, n int, f func(i int)) {
	t.Helper()
	sem := make(chan struct{}, 10)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			f(i)
		})
	}
	wg.Wait()
}
