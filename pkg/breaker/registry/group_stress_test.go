package registry

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
)

// TestGroupStress runs 32 goroutines against a Group bounded at 64 keys, calling keys from
// a space four times larger so that nearly every other creation evicts, while the clock
// moves, keys fail and open, and the policy, the bound and the summary are read and changed
// under them. Run it with -race. It checks that the breakers opened before the run (whose
// open period outlasts it) are never evicted, that the Group stays within its bound plus
// its open and half-open members, and that its counts agree with its members' states.
func TestGroupStress(t *testing.T) {
	const (
		goroutines = 32
		maxKeys    = 64
		keySpace   = 4 * maxKeys
	)
	iterations := 3000
	if testing.Short() {
		iterations = 300
	}
	clock := newFakeClock()
	p := breaker.Policy{OpenTimeout: time.Hour, Window: time.Second, FailureRatio: 0.5, MinimumThroughput: 4, SuccessThreshold: 1, HalfOpenPermittedCalls: 2}
	g, err := NewGroup("stress", p, breaker.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	g.SetMaxKeys(maxKeys)

	pinned := map[string]*breaker.Breaker{}
	for i := range 5 {
		k := "pinned-" + strconv.Itoa(i)
		pinned[k] = g.Get(k)
		pinned[k].Trip()
	}

	ctx := context.Background()
	var wg sync.WaitGroup
	for w := range goroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range iterations {
				k := rng.IntN(keySpace)
				key := strconv.Itoa(k)
				switch {
				case w == 0 && rng.IntN(50) == 0:
					clock.Advance(time.Duration(rng.IntN(300)) * time.Millisecond)
				case w == 1 && rng.IntN(100) == 0:
					q := p
					q.MinimumThroughput = 3 + rng.IntN(3)
					if err := g.Update(q); err != nil {
						t.Error(err)
					}
				case w == 2 && rng.IntN(100) == 0:
					g.SetMaxKeys(maxKeys/2 + rng.IntN(maxKeys))
				case w == 3 && rng.IntN(20) == 0:
					if s := g.Summary(); s.Open < len(pinned) {
						t.Errorf("summary counts %d open keys, fewer than the %d pinned", s.Open, len(pinned))
					}
				}
				_ = g.Get(key).Execute(ctx, func(context.Context) error {
					if k%9 == 0 { // a few keys are down
						return errBoom
					}
					return nil
				})
			}
		})
	}
	wg.Wait()
	g.SetMaxKeys(maxKeys)

	for k, b := range pinned {
		if got, ok := g.lookup(k); !ok || got != b {
			t.Errorf("the open breaker of %s was evicted", k)
		}
	}
	s := g.Summary()
	open, halfOpen := 0, 0
	for _, k := range g.keys() {
		b, _ := g.lookup(k)
		switch b.State() {
		case breaker.Open:
			open++
		case breaker.HalfOpen:
			halfOpen++
		}
	}
	if s.Keys != len(g.keys()) || s.Open != open || s.HalfOpen != halfOpen {
		t.Errorf("summary %d keys, %d open, %d half-open; members %d, %d, %d", s.Keys, s.Open, s.HalfOpen, len(g.keys()), open, halfOpen)
	}
	if s.Keys > maxKeys && s.Keys > open+halfOpen {
		t.Errorf("%d keys over a bound of %d with only %d not closed", s.Keys, maxKeys, open+halfOpen)
	}
	if s.State != breaker.Open {
		t.Errorf("Group state %v with pinned open keys", s.State)
	}
	t.Logf("%d keys, %d open, %d half-open, worst %v", s.Keys, s.Open, s.HalfOpen, s.Worst)
}
