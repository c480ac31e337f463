package registry

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/internal/fakeclock"
	"github.com/fusebox-dev/fusebox/pkg/breaker/observe"
)

var errBoom = errors.New("boom")

func newFakeClock() *fakeclock.Clock {
	return fakeclock.NewClock(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
}

// testPolicy opens on 20 calls half of which failed, as the core's tests do.
func testPolicy() breaker.Policy {
	return breaker.Policy{OpenTimeout: 30 * time.Second, Window: 10 * time.Second, FailureRatio: 0.5, MinimumThroughput: 20, SuccessThreshold: 2, HalfOpenPermittedCalls: 1}
}

// withDefaults is p as a breaker running it reports it.
func withDefaults(p breaker.Policy) breaker.Policy {
	b, err := breaker.New("defaults", p)
	if err != nil {
		panic(err)
	}
	return b.Policy()
}

// lookup returns the breaker of key if g holds one, without creating it or marking it
// used.
func (g *Group) lookup(key string) (*breaker.Breaker, bool) {
	if v, ok := g.index.Load(key); ok {
		return v.(*groupMember).b, true
	}
	return nil, false
}

// doN makes n admitted calls through b, each returning err.
func doN(t *testing.T, b *breaker.Breaker, n int, err error) {
	t.Helper()
	for range n {
		done, aerr := b.Allow()
		if aerr != nil {
			t.Fatalf("call refused: %v", aerr)
		}
		done(err)
	}
}

func wantState(t *testing.T, b *breaker.Breaker, want breaker.State) {
	t.Helper()
	if got := b.State(); got != want {
		t.Fatalf("State() = %v, want %v", got, want)
	}
}

// recorder keeps the transitions it is told of.
type recorder struct{ transitions []observe.Transition }

func (r *recorder) OnTransition(t observe.Transition) { r.transitions = append(r.transitions, t) }

func (r *recorder) takeTransitions() []observe.Transition {
	t := r.transitions
	r.transitions = nil
	return t
}

// keys returns the keys the Group holds, sorted.
func (g *Group) keys() []string {
	g.mu.Lock()
	keys := make([]string, 0, len(g.members))
	for k := range g.members {
		keys = append(keys, k)
	}
	g.mu.Unlock()
	slices.Sort(keys)
	return keys
}
