package breakertest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/observe"
)

// Recorder is a observe.Observer that keeps every transition it sees, for a test to assert
// on: give it to a breaker with breaker.WithObserver. Transitions are kept in the order
// the breaker made them: deliveries from different goroutines may arrive out of order, and
// the Recorder puts each breaker's transitions back in order by Transition.Period.
// A Recorder may watch several breakers, but its sequences ([Recorder.States]) do not say
// which breaker made a transition: give each breaker its own Recorder to assert on one.
// The zero value is ready to use, and a Recorder is safe for concurrent use.
type Recorder struct {
	mu     sync.Mutex
	seen   []observe.Transition   // guarded by mu
	waited map[transitionKey]bool // the transitions Wait returned; guarded by mu
	// recorded is closed when a transition is recorded, to wake Waits; nil when no Wait
	// is waiting. Guarded by mu.
	recorded chan struct{}
}

type transitionKey struct {
	breaker string
	period  uint64
}

var _ observe.Observer = (*Recorder)(nil)

// OnTransition records t.
func (r *Recorder) OnTransition(t observe.Transition) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// Insert t after the last transition of its breaker that came before it.
	at := len(r.seen)
	for i := len(r.seen) - 1; i >= 0; i-- {
		if s := r.seen[i]; s.Breaker == t.Breaker {
			if s.Period < t.Period {
				break
			}
			at = i
		}
	}
	r.seen = append(r.seen, observe.Transition{})
	copy(r.seen[at+1:], r.seen[at:])
	r.seen[at] = t
	if r.recorded != nil {
		close(r.recorded)
		r.recorded = nil
	}
}

// Transitions returns a copy of the transitions recorded.
func (r *Recorder) Transitions() []observe.Transition {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]observe.Transition(nil), r.seen...)
}

// Len returns how many transitions were recorded.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen)
}

// Last returns the latest transition recorded, and false if there is none.
func (r *Recorder) Last() (observe.Transition, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.seen) == 0 {
		return observe.Transition{}, false
	}
	return r.seen[len(r.seen)-1], true
}

// Reset forgets every transition recorded, so that a test can assert on what follows.
func (r *Recorder) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen, r.waited = nil, nil
}

// States returns the transitions recorded as "from→to" strings in the spelling of
// breaker.State.String: "closed→open", "open→half_open", "half_open→closed", and
// "open→open" for a Trip that restarted an open period.
func (r *Recorder) States() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	states := make([]string, len(r.seen))
	for i, t := range r.seen {
		states[i] = Arrow(t)
	}
	return states
}

// Arrow spells a transition as [Recorder.States] does: "closed→open".
func Arrow(t observe.Transition) string { return t.From.String() + "→" + t.To.String() }

// Wait waits until a transition to state to is recorded that no earlier Wait returned, and
// returns it: the first such in the breaker's order. A test waits for a transition another
// goroutine makes with it, and for a second open after a first with a second Wait. It
// returns ctx's error if ctx ends first; bound it with context.WithTimeout.
func (r *Recorder) Wait(ctx context.Context, to breaker.State) (observe.Transition, error) {
	for {
		r.mu.Lock()
		for _, t := range r.seen {
			k := transitionKey{t.Breaker, t.Period}
			if t.To == to && !r.waited[k] {
				if r.waited == nil {
					r.waited = make(map[transitionKey]bool)
				}
				r.waited[k] = true
				r.mu.Unlock()
				return t, nil
			}
		}
		if r.recorded == nil {
			r.recorded = make(chan struct{})
		}
		recorded := r.recorded
		r.mu.Unlock()
		select {
		case <-recorded:
		case <-ctx.Done():
			return observe.Transition{}, fmt.Errorf("breakertest: no transition to %v recorded (seen: %s): %w", to, strings.Join(r.States(), ", "), ctx.Err())
		}
	}
}

// AssertStates reports an error on t, with a diff, unless the transitions recorded are
// exactly want, spelled as [Recorder.States] spells them ("->" may stand for "→"). It
// returns whether they were.
func (r *Recorder) AssertStates(t testing.TB, want ...string) bool {
	t.Helper()
	seen := r.Transitions()
	if d := diffStates(want, seen); d != "" {
		t.Errorf("breaker transitions differ (-want +got):\n%s", d)
		return false
	}
	return true
}

// Diff returns "" when the transitions recorded are exactly want, spelled as
// [Recorder.States] spells them ("->" may stand for "→"), and otherwise a line-by-line
// diff: "-" before a transition wanted and not recorded, "+" before one recorded and not
// wanted, each recorded one with its cause (and trigger, when calls opened the circuit).
func (r *Recorder) Diff(want ...string) string {
	return diffStates(want, r.Transitions())
}

func diffStates(want []string, seen []observe.Transition) string {
	got := make([]string, len(seen))
	for i, t := range seen {
		got[i] = Arrow(t)
	}
	norm := make([]string, len(want))
	same := len(want) == len(got)
	for i, w := range want {
		norm[i] = strings.ReplaceAll(strings.TrimSpace(w), "->", "→")
		same = same && norm[i] == got[i]
	}
	if same {
		return ""
	}
	var b strings.Builder
	for _, e := range diffLines(norm, got) {
		switch {
		case e.wi >= 0 && e.gi >= 0:
			fmt.Fprintf(&b, "  %s  (%s)\n", got[e.gi], detail(seen[e.gi]))
		case e.wi >= 0:
			fmt.Fprintf(&b, "- %s\n", norm[e.wi])
		default:
			fmt.Fprintf(&b, "+ %s  (%s)\n", got[e.gi], detail(seen[e.gi]))
		}
	}
	return b.String()
}

// detail says what moved the state: the reason, and for calls that moved it, the trigger
// of an open and the counts behind it.
func detail(t observe.Transition) string {
	s := t.Reason
	if t.Trigger != "" {
		s += ", " + t.Trigger
	}
	if t.Reason == breakerconfig.ReasonTripped || t.Reason == breakerconfig.ReasonProbeFailed || t.Reason == breakerconfig.ReasonProbesSucceeded {
		c := t.Counts
		s += fmt.Sprintf(", %d calls %d failures %d successes", c.Calls, c.Failures, c.Successes)
		if c.Slow > 0 {
			s += fmt.Sprintf(" %d slow", c.Slow)
		}
	}
	return s
}

// edit is one line of a diff: a line of both (wi and gi set), of want only (gi -1) or of
// got only (wi -1).
type edit struct{ wi, gi int }

// diffLines aligns want and got on their longest common subsequence: transition logs are
// short, so the quadratic table costs nothing.
func diffLines(want, got []string) []edit {
	n, m := len(want), len(got)
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if want[i] == got[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out []edit
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && want[i] == got[j]:
			out = append(out, edit{i, j})
			i++
			j++
		case i < n && (j == m || lcs[i+1][j] >= lcs[i][j+1]):
			out = append(out, edit{i, -1})
			i++
		default:
			out = append(out, edit{-1, j})
			j++
		}
	}
	return out
}
