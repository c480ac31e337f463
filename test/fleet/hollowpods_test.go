package fleet

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// The synthetic pods of a hollow host (FLEET_HOLLOW): what each pod's breakers say, as a
// real pod's reporter writes it (pkg/breaker/kube, entries.go), moved by what the harness
// does to the pods (start, trip, recover) and by the published config the host watches
// (a new generation; a fleet verdict, taken as pkg/breaker's Adopt takes it).

// tripCalls and tripFailurePercent are the window a synthetic pod trips on: a dependency
// that fails every call, past the minimum throughput.
const (
	tripCalls          = 20
	tripFailurePercent = 100
)

// wireState is a breaker.State as reports spell it.
var wireState = map[breaker.State]string{
	breaker.Closed: breakerconfig.StateClosed, breaker.Open: breakerconfig.StateOpen, breaker.HalfOpen: breakerconfig.StateHalfOpen,
}

// startedEntry is the entry of a breaker that has not moved since the pod started using
// it under config generation.
func startedEntry(name string, at time.Time, generation int64) breakerconfig.ReportEntry {
	return breakerconfig.ReportEntry{
		Name: name, State: breakerconfig.StateClosed, Since: breakerconfig.NewTime(at), Reason: breakerconfig.ReasonStarted,
		ConfigGeneration: generation,
	}
}

// tripped is e opened at at by the pod's own calls, for its first open period of
// openTimeout.
func tripped(e breakerconfig.ReportEntry, at time.Time, openTimeout time.Duration) breakerconfig.ReportEntry {
	calls, rate := int64(tripCalls), int32(tripFailurePercent)
	timeout := breakerconfig.Duration(openTimeout)
	e.State, e.Since, e.Reason = breakerconfig.StateOpen, breakerconfig.NewTime(at), breakerconfig.ReasonTripped
	e.Calls, e.FailureRatePercent, e.Trigger = &calls, &rate, breakerconfig.TriggerFailureRate
	e.ConsecutiveOpens, e.OpenTimeout = 1, &timeout
	return e
}

// probed is e closed at at by one successful probe (successThreshold 1).
func probed(e breakerconfig.ReportEntry, at time.Time) breakerconfig.ReportEntry {
	calls, rate := int64(1), int32(0)
	e.State, e.Since, e.Reason = breakerconfig.StateClosed, breakerconfig.NewTime(at), breakerconfig.ReasonProbesSucceeded
	e.Calls, e.FailureRatePercent, e.Trigger = &calls, &rate, ""
	e.ConsecutiveOpens, e.OpenTimeout = 0, nil
	return e
}

// adopt is e once the pod has taken the fleet's verdict v at now, under a policy whose
// longest open period is longest, and whether that changed e: pkg/breaker's Adopt
// (verdict.go), as the entry shows it.
//   - Open: from any state, Open/Adopted since v.Since, without the pod's own window, for
//     the verdict's open period; a circuit already open keeps its reason and takes the
//     verdict's since and period.
//   - HalfOpen: from Open only, HalfOpen/Adopted.
//   - Closed: from Open or HalfOpen, Closed/Adopted, unless v.Since is before the pod's
//     open period began (a verdict about an older outage).
//
// A verdict from before the pod's own last transition is stale and changes nothing, and
// a v.Since later than now means now and never re-times a running open period.
func adopt(e breakerconfig.ReportEntry, v breakerconfig.Verdict, longest time.Duration, now time.Time) (breakerconfig.ReportEntry, bool) {
	since, future := v.Since, v.Since.IsZero() || v.Since.After(now)
	if future {
		since = now
	}
	at := breakerconfig.NewTime(since)
	stale := e.Reason != breakerconfig.ReasonStarted && at.Before(e.Since.Time)
	opens := max(int32(v.ConsecutiveOpens), 1)
	period := time.Duration(v.OpenTimeout)
	if period <= 0 || period > longest {
		period = longest
	}
	before := e
	switch v.State {
	case breakerconfig.StateOpen:
		if e.State == breakerconfig.StateOpen {
			if !future {
				e.Since = at
			}
			if v.ConsecutiveOpens > 0 {
				e.ConsecutiveOpens = opens
			}
			if v.OpenTimeout > 0 {
				d := breakerconfig.Duration(period)
				e.OpenTimeout = &d
			}
			break
		}
		if stale {
			return e, false
		}
		d := breakerconfig.Duration(period)
		e.State, e.Since, e.Reason = breakerconfig.StateOpen, at, breakerconfig.ReasonAdopted
		e.Calls, e.FailureRatePercent, e.Trigger = nil, nil, ""
		e.ConsecutiveOpens, e.OpenTimeout = opens, &d
	case breakerconfig.StateHalfOpen:
		if e.State != breakerconfig.StateOpen || stale {
			return e, false
		}
		e.State, e.Since, e.Reason = breakerconfig.StateHalfOpen, at, breakerconfig.ReasonAdopted
		e.Calls, e.FailureRatePercent, e.Trigger = nil, nil, ""
	case breakerconfig.StateClosed:
		if e.State == breakerconfig.StateClosed || e.State == breakerconfig.StateOpen && at.Before(e.Since.Time) {
			return e, false
		}
		e.State, e.Since, e.Reason = breakerconfig.StateClosed, at, breakerconfig.ReasonAdopted
		e.Calls, e.FailureRatePercent, e.Trigger = nil, nil, ""
		e.ConsecutiveOpens, e.OpenTimeout = 0, nil
	}
	return e, !reflect.DeepEqual(before, e)
}

// sendsNow reports whether a real pod's reporter sends its report at once when its entry
// moves from old to next under a new config: for a new state or reason, or a new config
// generation. A verdict that only re-times a circuit already open (its since, its period)
// goes with the pod's next report, as pkg/breaker's Adopt publishes it to the call path
// without a transition to report.
func sendsNow(old, next breakerconfig.ReportEntry) bool {
	return old.State != next.State || old.Reason != next.Reason || old.ConfigGeneration != next.ConfigGeneration ||
		old.ConfigError != next.ConfigError
}

// longestOpen is the longest open period c's policy allows: its maxOpenTimeout when it
// backs off, else its openTimeout.
func longestOpen(c breakerconfig.Config) time.Duration {
	return time.Duration(max(c.MaxOpenTimeout, c.OpenTimeout))
}

// configure is e under config c at now: the generation the pod runs, and the fleet's
// verdict taken, for a breaker of scope Fleet.
func configure(e breakerconfig.ReportEntry, c breakerconfig.Config, now time.Time) breakerconfig.ReportEntry {
	e.ConfigGeneration = c.Generation
	if c.Scope == breakerconfig.ScopeFleet && c.Verdict != nil {
		e, _ = adopt(e, *c.Verdict, longestOpen(c), now)
	}
	return e
}

// sortedEntries is a pod's entries as its report lists them: by name.
func sortedEntries(m map[string]breakerconfig.ReportEntry) []breakerconfig.ReportEntry {
	out := make([]breakerconfig.ReportEntry, 0, len(m))
	for _, e := range m {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b breakerconfig.ReportEntry) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// verdictCase is the incident the hollow pods' tests judge: a pod started at t0, the same
// pod tripped 2 s later, the fleet's Open verdict from t0+1 s, seen at t0+3 s.
func verdictCase() (t0 time.Time, started, trip breakerconfig.ReportEntry, open breakerconfig.Verdict, now time.Time) {
	t0 = time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)
	started = startedEntry("verdict", t0, 3)
	trip = tripped(started, t0.Add(2*time.Second), time.Minute)
	open = breakerconfig.Verdict{State: breakerconfig.StateOpen, Since: t0.Add(time.Second), ConsecutiveOpens: 1, OpenTimeout: breakerconfig.Duration(30 * time.Second)}
	return t0, started, trip, open, t0.Add(3 * time.Second)
}

// TestHollowAdopt runs always (it needs no cluster): a synthetic pod takes the fleet's
// verdict as pkg/breaker's Adopt does, so that hollow nodes report what real pods would.
func TestHollowAdopt(t *testing.T) {
	t0, started, trip, open, now := verdictCase()
	for _, c := range []struct {
		name   string
		e      breakerconfig.ReportEntry
		v      breakerconfig.Verdict
		want   breakerconfig.ReportEntry
		change bool
	}{
		{"a started pod adopts an open verdict, without a window of its own", started, open, func() breakerconfig.ReportEntry {
			e := started
			d := breakerconfig.Duration(30 * time.Second)
			e.State, e.Since, e.Reason, e.ConsecutiveOpens, e.OpenTimeout = breakerconfig.StateOpen, breakerconfig.NewTime(open.Since), breakerconfig.ReasonAdopted, 1, &d
			return e
		}(), true},
		{"a tripped pod keeps its reason and window and takes the verdict's since and period", trip, open, func() breakerconfig.ReportEntry {
			e := trip
			d := breakerconfig.Duration(30 * time.Second)
			e.Since, e.OpenTimeout = breakerconfig.NewTime(open.Since), &d
			return e
		}(), true},
		{"the same verdict again changes nothing", func() breakerconfig.ReportEntry { e, _ := adopt(started, open, time.Minute, now); return e }(), open,
			func() breakerconfig.ReportEntry { e, _ := adopt(started, open, time.Minute, now); return e }(), false},
		{"a verdict from before the pod's own transition is stale", probed(trip, t0.Add(5*time.Second)), open, probed(trip, t0.Add(5*time.Second)), false},
		{"a closed verdict closes an adopted open", func() breakerconfig.ReportEntry { e, _ := adopt(started, open, time.Minute, now); return e }(),
			breakerconfig.Verdict{State: breakerconfig.StateClosed, Since: t0.Add(2 * time.Second)}, func() breakerconfig.ReportEntry {
				e := started
				e.Since, e.Reason = breakerconfig.NewTime(t0.Add(2*time.Second)), breakerconfig.ReasonAdopted
				return e
			}(), true},
		{"a verdict from the future means now", func() breakerconfig.ReportEntry { e, _ := adopt(started, open, time.Minute, now); return e }(),
			breakerconfig.Verdict{State: breakerconfig.StateClosed, Since: t0.Add(time.Hour)}, func() breakerconfig.ReportEntry {
				e := started
				e.Since, e.Reason = breakerconfig.NewTime(now), breakerconfig.ReasonAdopted
				return e
			}(), true},
		{"an open verdict from the future opens now", started, breakerconfig.Verdict{State: breakerconfig.StateOpen, Since: t0.Add(time.Hour)}, func() breakerconfig.ReportEntry {
			e := started
			d := breakerconfig.Duration(time.Minute)
			e.State, e.Since, e.Reason, e.ConsecutiveOpens, e.OpenTimeout = breakerconfig.StateOpen, breakerconfig.NewTime(now), breakerconfig.ReasonAdopted, 1, &d
			return e
		}(), true},
		{"a closed verdict about an older outage does not close", trip, breakerconfig.Verdict{State: breakerconfig.StateClosed, Since: t0.Add(time.Second)}, trip, false},
		{"a half-open verdict moves only an open circuit", started, breakerconfig.Verdict{State: breakerconfig.StateHalfOpen, Since: t0.Add(time.Second)}, started, false},
		{"the verdict's period is at most the policy's longest", started, breakerconfig.Verdict{State: breakerconfig.StateOpen, Since: t0.Add(time.Second), OpenTimeout: breakerconfig.Duration(time.Hour)},
			func() breakerconfig.ReportEntry {
				e := started
				d := breakerconfig.Duration(time.Minute)
				e.State, e.Since, e.Reason, e.ConsecutiveOpens, e.OpenTimeout = breakerconfig.StateOpen, breakerconfig.NewTime(t0.Add(time.Second)), breakerconfig.ReasonAdopted, 1, &d
				return e
			}(), true},
	} {
		got, changed := adopt(c.e, c.v, time.Minute, now)
		if changed != c.change || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: got %+v (changed %v), want %+v (changed %v)", c.name, got, changed, c.want, c.change)
		}
		if err := (breakerconfig.AgentReport{Breakers: []breakerconfig.ReportEntry{got}}).Validate(); err != nil {
			t.Errorf("%s: the entry would be refused: %v", c.name, err)
		}
	}
}

// TestHollowSendsWhatRealPodsSend runs always: a verdict that only re-times a hollow pod's
// open circuit is not sent at once, as a real pod's reporter does not send it; one that
// moves its circuit, or a new generation, is.
func TestHollowSendsWhatRealPodsSend(t *testing.T) {
	_, started, trip, open, now := verdictCase()
	retimed, changed := adopt(trip, open, time.Minute, now)
	if !changed || sendsNow(trip, retimed) {
		t.Errorf("a tripped pod re-timed by the verdict: changed %v, sent at once %v; want changed, not sent", changed, sendsNow(trip, retimed))
	}
	adopted, _ := adopt(started, open, time.Minute, now)
	if !sendsNow(started, adopted) {
		t.Error("a pod that adopts the verdict does not send it at once")
	}
	next := started
	next.ConfigGeneration++
	if !sendsNow(started, next) {
		t.Error("a pod on a new config generation does not send it at once")
	}
}
