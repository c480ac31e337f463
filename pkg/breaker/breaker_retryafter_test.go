package breaker

import (
	"context"
	"testing"
	"time"
)

// TestRetryAfterNeverExceedsTheOpenPeriod: on the real clocks, the open period starts on an
// exact reading and RetryAfter reads the coarse clock, which may lag it by a tick; what a
// refused caller is told to wait must still never be longer than the open period itself.
func TestRetryAfterNeverExceedsTheOpenPeriod(t *testing.T) {
	const openTimeout = 30 * time.Second
	for i := range 200 {
		b, err := New("retry-after", Policy{OpenTimeout: openTimeout})
		if err != nil {
			t.Fatal(err)
		}
		_ = b.Execute(context.Background(), func(context.Context) error { return nil }) // the coarse clock runs
		b.Trip()
		d, ok := b.RetryAfter()
		if !ok || d > openTimeout || d <= 0 {
			t.Fatalf("try %d: RetryAfter() = %s, %t; want (0, %s]", i, d, ok, openTimeout)
		}
	}
}
