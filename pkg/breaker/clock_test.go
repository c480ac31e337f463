package breaker

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker/internal/core"
)

// TestWallClockStep: a step of the wall clock, either way, changes no duration a breaker
// measures (docs/design.md §5.14), while the timestamps that leave the process follow the wall
// clock.
func TestWallClockStep(t *testing.T) {
	for _, step := range []time.Duration{time.Hour, -time.Hour} {
		t.Run("step "+step.String(), func(t *testing.T) {
			t.Run("an open period lasts OpenTimeout", func(t *testing.T) {
				b, clock, _ := newTestBreaker(t, testPolicy())
				opened := openIt(t, b, clock)
				clock.Advance(10 * time.Second)
				clock.StepWall(step)
				wantState(t, b, Open)
				if d, ok := b.RetryAfter(); !ok || d != 20*time.Second {
					t.Fatalf("RetryAfter = %v, %v; want 20s", d, ok)
				}
				if v := b.Verdict(); !v.Since.Equal(opened) {
					t.Fatalf("the open period's start moved to %v, want %v", v.Since, opened)
				}
				clock.Advance(20*time.Second - 1)
				wantState(t, b, Open)
				clock.Advance(1)
				wantState(t, b, HalfOpen)
			})
			t.Run("the window judges the same calls", func(t *testing.T) {
				b, clock, _ := newTestBreaker(t, testPolicy())
				// At the start of a bucket, so that 10s later is the next one.
				now := clock.Now().UnixNano()
				w := int64(10 * time.Second)
				clock.Advance(time.Duration(w - now%w))
				doN(t, b, 19, errBoom)
				clock.StepWall(step)
				wantCounts(t, b, Counts{Calls: 19, Failures: 19})
				clock.Advance(19 * time.Second) // the previous bucket: still counted
				wantCounts(t, b, Counts{Calls: 19, Failures: 19})
				doN(t, b, 1, errBoom)
				wantState(t, b, Open)
				wantCounts(t, b, Counts{Calls: 20, Failures: 20})
			})
			t.Run("the window forgets on time, not earlier nor later", func(t *testing.T) {
				b, clock, _ := newTestBreaker(t, testPolicy())
				now := clock.Now().UnixNano()
				w := int64(10 * time.Second)
				clock.Advance(time.Duration(w - now%w))
				doN(t, b, 5, errBoom)
				clock.StepWall(step)
				clock.Advance(20*time.Second - 1)
				wantCounts(t, b, Counts{Calls: 5, Failures: 5})
				clock.Advance(1)
				wantCounts(t, b, Counts{})
			})
			t.Run("a leaked probe's limit", func(t *testing.T) {
				b, clock, _ := newTestBreaker(t, testPolicy())
				openIt(t, b, clock)
				clock.Advance(30 * time.Second)
				_, _ = b.Allow()
				clock.StepWall(step)
				clock.Advance(30*time.Second - 1)
				wantState(t, b, HalfOpen)
				clock.Advance(1)
				wantState(t, b, Open)
			})
			t.Run("timestamps that leave the process are wall-clock", func(t *testing.T) {
				b, clock, rec := newTestBreaker(t, testPolicy())
				clock.StepWall(step)
				b.Trip()
				tr := rec.takeTransitions()
				if len(tr) != 1 || !tr[0].At.Equal(clock.Now()) {
					t.Fatalf("transition %+v, want At %v", tr, clock.Now())
				}
				if v := b.Verdict(); !v.Since.Equal(clock.Now()) {
					t.Fatalf("Since %v, want %v", v.Since, clock.Now())
				}
				clock.Advance(30*time.Second - 1)
				wantState(t, b, Open)
				clock.Advance(1)
				wantState(t, b, HalfOpen)
			})
			t.Run("an adopted verdict is timed by its age on the wall clock", func(t *testing.T) {
				b, clock, _ := newTestBreaker(t, testPolicy())
				clock.StepWall(step)
				since := clock.Now().Add(-10 * time.Second)
				if !b.Adopt(Verdict{State: Open, Since: since}) {
					t.Fatal("not adopted")
				}
				if v := b.Verdict(); !v.Since.Equal(since) {
					t.Fatalf("Since %v, want the verdict's %v", v.Since, since)
				}
				clock.Advance(20*time.Second - 1)
				wantState(t, b, Open)
				clock.Advance(1)
				wantState(t, b, HalfOpen)
			})
		})
	}
}

// wallOnlyClock's Now readings carry no monotonic reading and it has no Monotonic method:
// a breaker then measures durations on the wall clock, the best it can do.
type wallOnlyClock struct{ c interface{ Now() time.Time } }

func (w wallOnlyClock) Now() time.Time { return w.c.Now() }

func TestClockWithoutMonotonicReadings(t *testing.T) {
	fake := newFakeClock()
	b, err := New("wall", testPolicy(), WithClock(wallOnlyClock{fake}))
	if err != nil {
		t.Fatal(err)
	}
	b.Trip()
	fake.Advance(29 * time.Second)
	wantState(t, b, Open)
	fake.Advance(time.Second)
	wantState(t, b, HalfOpen)
}

// TestRealClockTimeline checks the coarse clock's timeline against time.Now: they agree
// while nobody steps the wall clock, and the timeline is monotonic.
func TestRealClockTimeline(t *testing.T) {
	b, err := New("real", testPolicy())
	if err != nil {
		t.Fatal(err)
	}
	_ = b.Execute(context.Background(), succeed)
	first := b.now()
	if d := time.Duration(first - time.Now().UnixNano()); d > 0 || d < -time.Second {
		t.Fatalf("timeline is %v off the wall clock", d)
	}
	at := core.ExactInstant()
	if d := time.Duration(at.Mono - at.Wall); d < -time.Second || d > time.Second {
		t.Fatalf("exact instant: mono %d, wall %d", at.Mono, at.Wall)
	}
	if b.now() < first {
		t.Fatal("the timeline went backwards")
	}
}

// TestCoarseClockStopsSoon: the coarse clock's goroutine, the one goroutine the package
// starts, is gone after the last call, and it is named as internal/core/clock.go documents, for those
// who ignore it instead. It stops after coarseLifetime ticks of core.CoarseTick, about 100 ms,
// which goleak.VerifyNone's 400 ms of retries outlast; how long it took is logged, not
// asserted: a loaded machine delays the ticks, and a ticker that never stopped fails the
// generous bound below all the same.
func TestCoarseClockStopsSoon(t *testing.T) {
	const top = "github.com/fusebox-dev/fusebox/pkg/breaker/internal/core.(*coarseClock).run("
	b, err := New("goleak", Policy{})
	if err != nil {
		t.Fatal(err)
	}
	_ = b.Execute(context.Background(), func(context.Context) error { return nil })
	running := func() bool {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		for _, g := range strings.Split(string(buf), "\n\n") {
			// The first frame after the header line is the goroutine's top function.
			if lines := strings.SplitN(g, "\n", 3); len(lines) > 1 && strings.HasPrefix(lines[1], top) {
				return true
			}
		}
		return false
	}
	// A goroutine caught running on another thread shows no stack: look again, with a
	// call before each look so that the clock, which stops soon after the last call, is
	// still wanted however long a loaded machine takes between two looks.
	seen := false
	for range 200 {
		_ = b.Execute(context.Background(), func(context.Context) error { return nil })
		if seen = running(); seen {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if !seen {
		t.Fatalf("no goroutine whose top function is %s: the name internal/core/clock.go gives goleak is wrong", top)
	}
	start := time.Now()
	for absent := 0; absent < 3; time.Sleep(5 * time.Millisecond) { // gone on three looks in a row
		absent++
		if running() {
			absent = 0
		}
		if time.Since(start) > 10*time.Second {
			t.Fatal("the coarse clock's goroutine outlived the last call by 10 s: it does not stop")
		}
	}
	t.Logf("gone %v after the last call", time.Since(start).Round(time.Millisecond))
}
