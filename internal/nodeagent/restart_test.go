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
		return countsAre(t, node.Name, map[string][2]int32{shop: {2, 0}, blog: {1, 0}, quiet: {1, 0}})
	})

	// The incident: checkout-1 trips, and its report is written.
	trip(t, a1)
	eventually(t, "checkout-1's Open written", func() error {
		return countsAre(t, node.Name, map[string][2]int32{shop: {2, 1}})
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
	if state, _ := podState(t, agent, shop, "checkout-2", "payments"); state != breakerconfig.StateOpen {
		t.Fatalf("the agent holds checkout-2 %q, want its acknowledged Open", state)
	}
	agent.kill(t)
	if err := countsAre(t, node.Name, map[string][2]int32{shop: {2, 1}}); err != nil {
		t.Fatalf("checkout-2's Open was written before the kill (%v): the test shows nothing of a resend", err)
	}
	quietBefore := nodeReport(t, quiet, node.Name).ResourceVersion

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
		// checkout-2's Open only a resend can bring.
		if err := countsAre(t, node.Name, map[string][2]int32{shop: {2, 2}, blog: {1, 1}, quiet: {1, 0}}); err != nil {
			return err
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
	if rv := nodeReport(t, quiet, node.Name).ResourceVersion; rv != quietBefore {
		t.Errorf("the unchanged object of %s moved from resourceVersion %s to %s across the restart", quiet, quietBefore, rv)
	}
	for _, want := range []struct{ ns, pod, state string }{
		{shop, "checkout-1", breakerconfig.StateOpen}, {shop, "checkout-2", breakerconfig.StateOpen},
		{blog, "writer-1", breakerconfig.StateOpen}, {quiet, "batch-1", breakerconfig.StateClosed},
	} {
		if state, _ := podState(t, restarted, want.ns, want.pod, "payments"); state != want.state {
			t.Errorf("the restarted agent holds %s %q, want %s", want.pod, state, want.state)
		}
	}
	if n := restarted.writes.writesTo(shop); n < 1 {
		t.Errorf("the restarted agent never wrote %s, where checkout-2's Open was missing", shop)
	}
}

// countsAre checks, for each namespace, how many pods the node's object counts for breaker
// payments and how many of them are open.
func countsAre(t *testing.T, node string, want map[string][2]int32) error {
	t.Helper()
	for ns, w := range want {
		if pods, open := counted(t, ns, node, "payments", ""); pods != w[0] || open != w[1] {
			return fmt.Errorf("%s: %d pods, %d open; want %d, %d", ns, pods, open, w[0], w[1])
		}
	}
	return nil
}

// trip opens pod's breaker by its own calls.
func trip(t *testing.T, pod *appPod) {
	t.Helper()
	b := pod.reg.Get("payments")
	for b.State() != breaker.Open {
		_ = b.Execute(context.Background(), fails)
	}
}
