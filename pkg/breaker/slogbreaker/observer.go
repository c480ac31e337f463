package slogbreaker

import (
	"context"
	"log/slog"
	"runtime"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/observe"
)

// Message is the message of every record the observer writes; the details are attributes.
const Message = "circuit breaker transition"

// Observer logs every transition of the breakers it is given to with
// [breaker.WithObserver]. It is not a [observe.CallObserver]: it costs nothing per call.
// It is safe for concurrent use as long as its handler is.
type Observer struct {
	logger *slog.Logger
	level  func(observe.Transition) slog.Level
}

var _ observe.Observer = (*Observer)(nil)

// Option configures an [Observer].
type Option func(*Observer)

// WithLevel chooses the level of each record. The default is [DefaultLevel].
func WithLevel(level func(observe.Transition) slog.Level) Option {
	return func(o *Observer) { o.level = level }
}

// DefaultLevel logs a circuit that opens at Warn, since calls are being refused from then
// on, and every other transition at Info.
func DefaultLevel(t observe.Transition) slog.Level {
	if t.To == breaker.Open {
		return slog.LevelWarn
	}
	return slog.LevelInfo
}

// New returns an observer writing to l (slog.Default() when l is nil).
func New(l *slog.Logger, opts ...Option) *Observer {
	o := &Observer{logger: l, level: DefaultLevel}
	for _, opt := range opts {
		opt(o)
	}
	return o
}

// OnTransition implements [observe.Observer]. The record's time is the transition's time,
// not the time it is logged, so that records of transitions adopted from another process
// say when the verdict was reached.
func (o *Observer) OnTransition(t observe.Transition) {
	l := o.logger
	if l == nil {
		l = slog.Default()
	}
	ctx := context.Background()
	level := o.level(t)
	if !l.Enabled(ctx, level) {
		return
	}
	var pcs [1]uintptr
	runtime.Callers(2, pcs[:]) // the breaker's frame that delivered the transition
	r := slog.NewRecord(t.At, level, Message, pcs[0])
	if t.At.IsZero() {
		r.Time = time.Now()
	}
	r.AddAttrs(
		slog.String("breaker", t.Breaker),
		slog.String("from", t.From.String()),
		slog.String("to", t.To.String()),
		slog.String("reason", t.Reason),
		slog.Uint64("period", t.Period),
		slog.Int64("calls", t.Counts.Calls),
		slog.Int64("failures", t.Counts.Failures),
		slog.Int64("successes", t.Counts.Successes),
	)
	if t.Counts.Calls > 0 {
		r.AddAttrs(slog.Float64("failure_rate", float64(t.Counts.Failures)/float64(t.Counts.Calls)))
	}
	// Why it opened, with the figure: the failure rate above, or the slow calls.
	if t.Trigger != "" {
		r.AddAttrs(slog.String("trigger", t.Trigger))
	}
	if t.Counts.Slow > 0 {
		r.AddAttrs(slog.Int64("slow", t.Counts.Slow))
		if t.Counts.Calls > 0 {
			r.AddAttrs(slog.Float64("slow_call_rate", float64(t.Counts.Slow)/float64(t.Counts.Calls)))
		}
	}
	if t.To == breaker.Open && t.OpenTimeout > 0 {
		r.AddAttrs(slog.Int("consecutive_opens", t.ConsecutiveOpens), slog.Duration("open_for", t.OpenTimeout))
	}
	if t.Err != nil {
		r.AddAttrs(slog.String("error", t.Err.Error()))
	}
	_ = l.Handler().Handle(ctx, r)
}
