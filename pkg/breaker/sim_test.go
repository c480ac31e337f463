package breaker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// Simulations of the fleet arithmetic (docs/benchmarks.md, "Retry budget and adaptive
// throttling"): in-process pods, each a breaker on one fake clock, no API server; the
// operator's part is played by SetFleet with what it would publish. Run them with
//
//	go test -v -count=1 -run 'TestSimulate' ./pkg/breaker/
//
// and read the figures from the log.

// 200 pods × 5 requests/s against an upstream that is 100% down, up to 3 attempts per call,
// RetryBudget{20, 10}. The breakers are ForcedClosed: under Enforce the failures would open
// every circuit within 20 calls and nothing would be retried at all, so the breaker, not the
// budget, would be doing the limiting. Told Fleet{Pods: 200}, each pod has 1/200 of the
// floor, and the fleet's retries stay ≤ 20% of first attempts + 10/s; left at pods = 1 (the
// per-pod floor of other retry budgets) the same fleet retries about 2,000/s.
func TestSimulateFleetRetryBudget(t *testing.T) {
	t.Parallel()
	const pods, rate, seconds = 200, 5, 120
	run := func(fleetKnown bool) (first, retries int64) {
		clk := newFakeClock()
		fleet := make([]*Breaker, pods)
		for i := range fleet {
			b, err := New(fmt.Sprint("pod-", i), Policy{Mode: ModeForcedClosed, RetryBudget: &RetryBudget{Percent: 20, MinPerSecond: 10}}, WithClock(clk))
			if err != nil {
				t.Fatal(err)
			}
			if fleetKnown {
				b.SetFleet(Fleet{Pods: pods})
			}
			fleet[i] = b
		}
		var attempts int64
		down := func(context.Context) error { attempts++; return errBoom }
		for range seconds * rate {
			for _, b := range fleet {
				before := attempts
				err := Retry(context.Background(), b, 3, down, WithBackoff(0, 0))
				if !errors.Is(err, errBoom) {
					t.Fatalf("Retry: %v", err)
				}
				first++
				retries += attempts - before - 1
			}
			clk.Advance(time.Second / rate)
		}
		return first, retries
	}
	first, retries := run(true)
	bound := 0.2*float64(first) + 10*seconds
	t.Logf("fleet share (pods=200): %d first attempts, %d retries over %ds: %.1f retries/s for %.0f first attempts/s; bound 20%% + 10/s = %.1f/s",
		first, retries, seconds, float64(retries)/seconds, float64(first)/seconds, bound/seconds)
	if float64(retries) > bound {
		t.Fatalf("fleet retried %d times, more than 20%% of %d first attempts + 10/s (%.0f)", retries, first, bound)
	}
	if float64(retries) < 0.15*float64(first) {
		t.Fatalf("fleet retried only %d times over %d first attempts: the budget should allow about 20%%", retries, first)
	}
	first, perPod := run(false)
	t.Logf("per-pod floor (pods unknown, 1): %d first attempts, %d retries: %.1f retries/s, %.1fx the fleet share",
		first, perPod, float64(perPod)/seconds, float64(perPod)/float64(retries))
	if perPod < 1500*seconds {
		t.Fatalf("per-pod floors allowed only %.1f retries/s; the counterfactual should approach 2,000/s", float64(perPod)/seconds)
	}
}

// 50 pods at 20 requests/s each (1,000/s) against an upstream that accepts at most 200/s,
// throttling with k 2: once the windows have filled, the upstream sees at most k × what it
// accepted + 5%. FailureRatio 1: a window is never all failures here, so the circuit stays
// closed and throttling alone sheds the load.
func TestSimulateThrottlingOverload(t *testing.T) {
	const pods, tick, perTick, seconds, warmup = 50, 10 * time.Millisecond, 2, 300, 30
	const k = 2.0
	clk := newFakeClock()
	fleet := make([]*Breaker, pods)
	for i := range fleet {
		b, err := New(fmt.Sprint("pod-", i), Policy{FailureRatio: 1, Throttle: &Throttle{K: k}}, WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(uint64(i), 16))
		b.rnd = r.Float64
		fleet[i] = b
	}
	order := rand.New(rand.NewPCG(50, 200))
	var seen, accepted, throttled, asked int64
	ticks := int(seconds * time.Second / tick)
	for n := range ticks {
		measuring := n >= int(warmup*time.Second/tick)
		capacity := perTick
		upstream := func(context.Context) error {
			if measuring {
				seen++
			}
			if capacity == 0 {
				return errBoom
			}
			capacity--
			if measuring {
				accepted++
			}
			return nil
		}
		for _, i := range order.Perm(pods) {
			if (n+i)%5 != 0 { // 20 requests/s, spread over the ticks
				continue
			}
			err := fleet[i].Execute(context.Background(), upstream)
			if measuring {
				asked++
				if errors.Is(err, ErrThrottled) {
					throttled++
				}
			}
		}
		clk.Advance(tick)
	}
	ratio := float64(seen) / float64(accepted)
	t.Logf("after %ds of warm-up, %ds: %d asked, %d throttled locally, upstream saw %d and accepted %d: %.3f × accepted (k = %v, bound %.2f)",
		warmup, seconds-warmup, asked, throttled, seen, accepted, ratio, k, k*1.05)
	if ratio > k*1.05 {
		t.Fatalf("upstream saw %.3f × what it accepted, more than k + 5%%", ratio)
	}
	for _, b := range fleet {
		if b.State() != Closed {
			t.Fatal("a circuit opened: the throttling was not what shed the load")
		}
	}
}

// A pod sending 1 request/s never has MinimumThroughput (20) requests in its window, so it
// throttles on the fleet's figures, and its rejection rate is the fleet's ratio.
func TestSimulateQuietPodLearnsFromFleet(t *testing.T) {
	for _, f := range []Fleet{{Pods: 50, Requests: 12000, Accepts: 4000}, {Pods: 50, Requests: 10000, Accepts: 2000}} {
		const k, seconds = 2.0, 20000
		clk := newFakeClock()
		b, err := New("quiet", Policy{Throttle: &Throttle{K: k}}, WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		b.rnd = rand.New(rand.NewPCG(uint64(f.Requests), 1)).Float64
		b.SetFleet(f)
		var throttled int64
		for range seconds {
			if errors.Is(b.Execute(context.Background(), succeed), ErrThrottled) {
				throttled++
			}
			clk.Advance(time.Second)
		}
		want := throttleProbability(f.Requests, f.Accepts, k)
		got := float64(throttled) / seconds
		t.Logf("fleet %d requests / %d accepts (k %v): fleet ratio %.4f, the quiet pod rejected %.4f of %d requests",
			f.Requests, f.Accepts, k, want, got, seconds)
		if math.Abs(got-want) > 0.05 {
			t.Fatalf("quiet pod rejected %.4f, fleet ratio %.4f", got, want)
		}
	}
}
