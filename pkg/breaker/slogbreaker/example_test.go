package slogbreaker_test

import (
	"context"
	"errors"
	"log/slog"
	"os"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/slogbreaker"
)

func Example() {
	// Drop the time so that the output is stable; a real handler keeps it.
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	p := breaker.DefaultPolicy()
	p.MinimumThroughput = 2
	b, _ := breaker.New("payments", p, breaker.WithObserver(slogbreaker.New(logger)))
	for range 2 {
		_ = b.Execute(context.Background(), func(context.Context) error { return errors.New("upstream 503") })
	}
	// Output:
	// level=WARN msg="circuit breaker transition" breaker=payments from=closed to=open reason=Tripped period=1 calls=2 failures=2 successes=0 failure_rate=1 trigger=FailureRate consecutive_opens=1 open_for=30s error="upstream 503"
}
