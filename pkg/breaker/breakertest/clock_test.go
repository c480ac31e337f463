package breakertest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakertest"
)

func TestClockMovesOnlyWhenAdvanced(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := breakertest.NewClock(start)
	if !c.Now().Equal(start) {
		t.Fatalf("Now() = %v, want %v", c.Now(), start)
	}
	c.Advance(90 * time.Second)
	if got := c.Now().Sub(start); got != 90*time.Second {
		t.Fatalf("advanced by %v, want 90s", got)
	}
}

func TestStepWallMovesOnlyTheWallClock(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := breakertest.NewClock(start)
	c.Advance(time.Second)
	c.StepWall(-time.Hour)
	if got := c.Now().Sub(start); got != time.Second-time.Hour {
		t.Fatalf("wall clock moved by %v, want 1s - 1h", got)
	}
	if got := c.Monotonic(); got != time.Second {
		t.Fatalf("monotonic reading %v, want 1s", got)
	}
}

// A breaker on the clock goes half-open when the test says its timeout passed.
func ExampleClock() {
	clock := breakertest.NewClock(time.Now())
	p := breaker.DefaultPolicy()
	p.MinimumThroughput = 1
	b, _ := breaker.New("payments", p, breaker.WithClock(clock))
	_ = b.Execute(context.Background(), func(context.Context) error { return errors.New("down") })
	fmt.Println(b.State())
	clock.Advance(p.OpenTimeout)
	fmt.Println(b.State())
	// Output:
	// open
	// half_open
}
