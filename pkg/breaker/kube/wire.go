package kube

import (
	"math"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// maxConfigError leaves room under the schema's bound on configError.
const maxConfigError = breakerconfig.MaxConfigErrorSize - 24

// reportEntry is m as the report spells it.
func reportEntry(name string, m member) breakerconfig.ReportEntry {
	e := breakerconfig.ReportEntry{
		Name:             name,
		State:            wireState(m.state),
		Since:            breakerconfig.NewTime(m.since),
		Reason:           m.reason,
		ConfigGeneration: m.generation,
		ConfigError:      m.configErr,
	}
	if m.calls > 0 {
		calls := m.calls
		e.Calls, e.FailureRatePercent = &calls, percent(m.failures, m.calls)
		if m.slowJudged {
			e.SlowCallRatePercent = percent(m.slow, m.calls)
		}
	}
	e.Trigger = m.trigger
	if m.consecutiveOpens > 0 {
		e.ConsecutiveOpens = m.consecutiveOpens
		if m.openTimeout > 0 {
			d := breakerconfig.Duration(m.openTimeout)
			e.OpenTimeout = &d
		}
	}
	if t := m.traffic; t.on {
		e.Requests, e.Accepts, e.Retries, e.Throttled = &t.requests, &t.accepts, &t.retries, &t.throttled
	}
	if f := m.traffic.inFlight; f.on {
		e.InFlightPeak, e.Limited = &f.peak, &f.limited
		if f.baseline > 0 {
			b := breakerconfig.Duration(f.baseline)
			e.Baseline = &b
		}
	}
	e.Candidate = candidateEntry(m.candidate)
	if m.group {
		e.Keys = &breakerconfig.KeySummary{Keys: m.keys, Open: m.open, HalfOpen: m.halfOpen}
		if m.nWorst > 0 {
			e.Keys.Worst = slices.Clone(m.worst[:m.nWorst])
		}
	}
	return e
}

// percent is n of total in whole percent, rounded.
func percent(n, total int64) *int32 {
	rate := int32(math.Round(100 * float64(min(n, total)) / float64(total)))
	return &rate
}

func wireState(s breaker.State) string {
	switch s {
	case breaker.Open:
		return breakerconfig.StateOpen
	case breaker.HalfOpen:
		return breakerconfig.StateHalfOpen
	}
	return breakerconfig.StateClosed
}

// wireTime is t as the report carries it: to the millisecond.
func wireTime(t time.Time) time.Time { return breakerconfig.NewTime(t).Time }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
