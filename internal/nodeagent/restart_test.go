package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakertest"
)

var errDown = errors.New("dependency down")

func fails(context.Context) error    { return errDown }
func succeeds(context.Context) error { return nil }

// TestAgentKilledMidIncident: an agent killed in the middle of an incident, with a change
// it had acknowledged but not written yet. Meanwhile the pods keep deciding alone: an open
// circuit stays open and refuses calls, a closed one runs them, and one more pod trips.
// The agent restarted on the same address reads back what it wrote, the pods see a new
// agent and resend, and it converges: every state the pods hold is written, and the
// object of a namespace where nothing changed is not written at all.
func TestAgentKilledMidIncident(t *testing.T) {
	t.Parallel()
	node := newNode(t)
	shop, blog, quiet := newNamespace(t), newNamespace(t), newNamespace(t)
	p := breaker.DefaultPolicy()
	p.MinimumThroughput = 2
	for _, ns := range []string{shop, blog, quiet} {
		writeConfigMap(t, ns, map[string]breaker.Policy{"payments": p}, 1)
	}
	agent := startAgent(t, node, agentOptions{})
	clock := breakertest.NewClock(time.Now().UTC().Truncate(time.Second))
	a1 := startAppPod(t, agent, newPod(t, shop, "checkout-1", node.Name), clock, "payments")
	a2 := startAppPod(t, agent, newPod(t, shop, "checkout-2", node.Name), clock, "payments")
	b1 := startAppPod(t, agent, newPod(t, blog, "writer-1", node.Name), clock, "payments")
	q1 := startAppPod(t, agent, newPod(t, quiet, "batch-1", node.Name), clock, "payments")
	pods := []*appPod{a1, a2, b1, q1}
	eventually(t, "every pod's first report written", func() error {
		for _, pod := range pods {
			if state, _ := stateOf(nodeReport(t, pod.pod.Namespace, node.Name), pod.pod.Name, "payments"); state != breakerconfig.StateClosed {
				return fmt.Errorf("%s: %q", pod.pod.Name, state)
			}
		}
		return nil
	})

	// The incident: checkout-1 trips, and its report is written.
	trip(t, a1)
	eventually(t, "checkout-1's Open written", func() error {
		if state, _ := stateOf(nodeReport(t, shop, node.Name), "checkout-1", "payments"); state != breakerconfig.StateOpen {
			return fmt.Errorf("%q", state)
		}
		return nil
	})
	// checkout-2 trips too; the agent acknowledges it but, paced, has not written it when
	// it is killed.
	agent.book.mu.Lock()
	agent.book.pace = pacing{interval: time.Hour, hold: time.Hour}
	agent.book.mu.Unlock()
	trip(t, a2)
	eventually(t, "checkout-2's report acknowledged", func() error {
		if !a2.agent.ReportWritten() {
			return errors.New("not yet")
		}
		return nil
	})
	agent.kill(t)
	if state, _ := stateOf(nodeReport(t, shop, node.Name), "checkout-2", "payments"); state != breakerconfig.StateClosed {
		t.Fatalf("checkout-2's Open was written before the kill (%q): the test shows nothing of a resend", state)
	}

	// The agent is gone: the pods decide alone.
	trip(t, b1)
	if err := a1.reg.Get("payments").Execute(context.Background(), succeeds); !errors.Is(err, breaker.ErrOpen) {
		t.Errorf("checkout-1 with its agent gone: %v, want its open circuit to refuse", err)
	}
	if err := q1.reg.Get("payments").Execute(context.Background(), succeeds); err != nil {
		t.Errorf("batch-1 with its agent gone: %v, want its closed circuit to run the call", err)
	}
	eventually(t, "writer-1's report failing, not dropped", func() error {
		if s := b1.agent.Stats(); s.WriteFailures == 0 || b1.agent.ReportWritten() {
			return fmt.Errorf("stats %+v", s)
		}
		return nil
	})

	restarted := startAgent(t, node, agentOptions{addr: agent.addr})
	if restarted.ID() == agent.ID() {
		t.Fatal("the restarted agent has the old one's identity")
	}
	eventually(t, "the restarted agent converged", func() error {
		for _, want := range []struct{ ns, pod, state string }{
			{shop, "checkout-1", breakerconfig.StateOpen},
			{shop, "checkout-2", breakerconfig.StateOpen}, // only a resend can bring it
			{blog, "writer-1", breakerconfig.StateOpen},
			{quiet, "batch-1", breakerconfig.StateClosed},
		} {
			if state, _ := stateOf(nodeReport(t, want.ns, node.Name), want.pod, "payments"); state != want.state {
				return fmt.Errorf("%s: %q, want %s", want.pod, state, want.state)
			}
		}
		for _, pod := range pods {
			if !pod.agent.ReportWritten() {
				return fmt.Errorf("%s still sending", pod.pod.Name)
			}
		}
		return nil
	})
	eventually(t, "the agent idle", idle(restarted))
	for _, pod := range pods {
		if s := pod.reg.Get("payments").State(); (pod == q1) != (s == breaker.Closed) {
			t.Errorf("%s's breaker is %v after the restart", pod.pod.Name, s)
		}
	}
	if n := restarted.writes.writesTo(quiet); n != 0 {
		t.Errorf("the restarted agent wrote the unchanged object of %s %d times", quiet, n)
	}
	if n := restarted.writes.writesTo(shop); n < 1 {
		t.Errorf("the restarted agent never wrote %s, where checkout-2's Open was missing", shop)
	}
}

// trip opens pod's breaker by its own calls.
func trip(t *testing.T, pod *appPod) {
	t.Helper()
	b := pod.reg.Get("payments")
	for b.State() != breaker.Open {
		_ = b.Execute(context.Background(), fails)
	}
}
