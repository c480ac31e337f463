package slogbreaker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakertest"
	"github.com/fusebox-dev/fusebox/pkg/breaker/observe"
	"github.com/fusebox-dev/fusebox/pkg/breaker/slogbreaker"
)

var errBoom = errors.New("upstream 503")

func records(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	dec := json.NewDecoder(buf)
	for dec.More() {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

func TestLogsEveryTransition(t *testing.T) {
	var buf bytes.Buffer
	obs := slogbreaker.New(slog.New(slog.NewJSONHandler(&buf, nil)))
	clock := breakertest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	p := breaker.DefaultPolicy()
	p.MinimumThroughput = 4
	p.SuccessThreshold = 1
	p.OpenTimeout = time.Minute
	b, err := breaker.New("payments", p, breaker.WithObserver(obs), breaker.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_ = b.Execute(ctx, func(context.Context) error { return nil })
	for range 3 {
		_ = b.Execute(ctx, func(context.Context) error { return errBoom })
	}
	openedAt := clock.Now()
	clock.Advance(time.Minute)
	_ = b.Execute(ctx, func(context.Context) error { return nil }) // half-open probe closes it

	got := records(t, &buf)
	if len(got) != 3 {
		t.Fatalf("%d records, want 3 (open, half-open, closed): %v", len(got), got)
	}
	open := got[0]
	for k, want := range map[string]any{
		"msg": slogbreaker.Message, "level": "WARN", "breaker": "payments", "from": "closed", "to": "open",
		"reason": "Tripped", "calls": 4.0, "failures": 3.0, "failure_rate": 0.75, "error": "upstream 503",
		"trigger": "FailureRate", "consecutive_opens": 1.0, "open_for": float64(time.Minute),
		"time": openedAt.Format(time.RFC3339Nano),
	} {
		if open[k] != want {
			t.Errorf("open record %s = %v, want %v", k, open[k], want)
		}
	}
	if got[1]["to"] != "half_open" || got[1]["reason"] != "TimedOut" || got[1]["level"] != "INFO" {
		t.Errorf("half-open record %v", got[1])
	}
	if got[2]["from"] != "half_open" || got[2]["to"] != "closed" || got[2]["successes"] != 1.0 {
		t.Errorf("closed record %v", got[2])
	}
	if _, ok := got[2]["error"]; ok {
		t.Errorf("closing record has an error: %v", got[2])
	}
}

func TestLevelAndDisabled(t *testing.T) {
	var buf bytes.Buffer
	h := slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelError})
	quiet := slogbreaker.New(slog.New(h))
	loud := slogbreaker.New(slog.New(h), slogbreaker.WithLevel(func(observe.Transition) slog.Level { return slog.LevelError }))
	tr := observe.Transition{Breaker: "b", From: breaker.Closed, To: breaker.Open, At: time.Now()}
	quiet.OnTransition(tr)
	if buf.Len() != 0 {
		t.Errorf("logged below the handler's level: %s", buf.String())
	}
	loud.OnTransition(tr)
	if got := records(t, &buf); len(got) != 1 || got[0]["level"] != "ERROR" {
		t.Errorf("records %v", got)
	}
}

func TestNilLoggerUsesDefault(t *testing.T) {
	var buf bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewJSONHandler(&buf, nil)))
	defer slog.SetDefault(old)
	slogbreaker.New(nil).OnTransition(observe.Transition{Breaker: "b", To: breaker.Open})
	if got := records(t, &buf); len(got) != 1 || got[0]["breaker"] != "b" {
		t.Errorf("records %v", got)
	}
}
