package breaker

import (
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/observe"
)

// refModel is the reference the breaker is compared with: docs/design.md §5 written as plainly
// as possible, single-threaded, with the window kept as a list of recorded outcomes tagged
// with their bucket index instead of counters. It reads two clocks (§5.14): durations on
// the monotonic one (mono), timestamps that leave the breaker on the wall clock (wall).
// instant is one moment on the model's two clocks.
type instant struct{ wall, mono int64 }

type refModel struct {
	p         Policy
	state     State
	gen       uint64
	since     int64 // wall
	sinceMono int64
	changed   bool
	openedAt  int64 // wall: start of the latest open period

	hi     int64 // index of the window's current bucket
	events []refEvent

	openTally  Counts
	opens      int           // the how-manyth consecutive open period (§5.13); 0 closed
	openFor    time.Duration // its length
	inflight   int
	probeCalls int64
	probeSucc  int64
	awaiting   bool  // a probe was admitted at lastProbe and no outcome came after it
	lastProbe  int64 // mono

	transitions []observe.Transition
	restarts    int // Trip on an open circuit
}

type refEvent struct {
	idx  int64
	fail bool
	slow bool
}

type refTicket struct {
	gen      uint64
	state    State
	recorded bool
	start    int64 // mono, when admitted
	slowAt   int64 // SlowCallDuration when admitted: the call is slow if it took this long
}

func newRefModel(p Policy, now instant) *refModel {
	m := &refModel{p: p.withDefaults(), since: now.wall, sinceMono: now.mono}
	if m.p.Mode == ModeForcedOpen {
		m.state = Open
		m.changed, m.openedAt = true, now.wall
		m.opens, m.openFor = 1, refPeriod(m.p, 1)
	}
	m.hi = m.bucketOf(now.mono)
	return m
}

func (m *refModel) bucketOf(mono int64) int64 { return floorDiv(mono, int64(m.p.Window)) }

func (m *refModel) roll(now instant) {
	if idx := m.bucketOf(now.mono); idx > m.hi {
		m.hi = idx
	}
	var kept []refEvent
	for _, e := range m.events {
		if e.idx >= m.hi-1 {
			kept = append(kept, e)
		}
	}
	m.events = kept
}

func (m *refModel) window() Counts {
	var c Counts
	for _, e := range m.events {
		c.Calls++
		if e.fail {
			c.Failures++
		}
		if e.slow {
			c.Slow++
		}
	}
	return c
}

func (m *refModel) counts(now instant) Counts {
	switch m.state {
	case Open:
		return m.openTally
	case HalfOpen:
		return Counts{Calls: m.probeCalls, Successes: m.probeSucc}
	}
	m.roll(now)
	return m.window()
}

// refPeriod is §5.13's k-th open period, spelled out.
func refPeriod(p Policy, k int) time.Duration {
	d := p.OpenTimeout
	if p.MaxOpenTimeout == 0 {
		return d
	}
	for i := 1; i < k; i++ {
		if d >= p.MaxOpenTimeout {
			break
		}
		d *= 2
	}
	return min(d, max(p.MaxOpenTimeout, p.OpenTimeout))
}

func (m *refModel) to(s State, cause string, c Counts, at, now instant) {
	m.toWith(s, cause, "", c, at, now, 0, 0)
}

func (m *refModel) toWith(s State, cause string, trig string, c Counts, at, now instant, opens int, openFor time.Duration) {
	from := m.state
	m.gen++
	m.state = s
	m.since, m.sinceMono = at.wall, at.mono
	m.changed = true
	switch s {
	case Open:
		m.openTally = Counts{Calls: c.Calls, Failures: c.Failures, Slow: c.Slow}
		m.openedAt = at.wall
		m.opens++
		if opens > 0 {
			m.opens = opens
		}
		m.openFor = openFor
		if openFor <= 0 {
			m.openFor = refPeriod(m.p, m.opens)
		}
	case Closed:
		m.openTally = Counts{}
		m.opens, m.openFor = 0, 0
	}
	tr := observe.Transition{From: from, To: s, At: time.Unix(0, at.wall), Counts: c, Reason: cause, Trigger: trig, Period: m.gen}
	if s != Closed {
		tr.ConsecutiveOpens, tr.OpenTimeout = m.opens, m.openFor
	}
	m.transitions = append(m.transitions, tr)
	m.inflight, m.probeCalls, m.probeSucc = 0, 0, 0
	m.awaiting = false
	m.events = nil
	m.hi = m.bucketOf(now.mono)
}

func (m *refModel) forced() bool { return m.p.Mode == ModeForcedOpen || m.p.Mode == ModeForcedClosed }

func (m *refModel) advance(now instant) {
	// Both moves happen when time makes them, however late they are noticed; the wall
	// clock reads that moment as long before now as the monotonic clock does.
	when := func(mono int64) instant { return instant{wall: now.wall - (now.mono - mono), mono: mono} }
	if end := m.sinceMono + int64(m.openFor); m.state == Open && m.p.Mode != ModeForcedOpen && now.mono >= end {
		m.to(HalfOpen, breakerconfig.ReasonTimedOut, m.openTally, when(end), now)
	}
	// No probe outcome for OpenTimeout after the last admission: the probes leaked.
	if end := m.lastProbe + int64(m.p.OpenTimeout); m.state == HalfOpen && m.awaiting && now.mono >= end {
		m.to(Open, breakerconfig.ReasonTimedOut, Counts{Calls: m.probeCalls, Successes: m.probeSucc}, when(end), now)
	}
}

func (m *refModel) admit(now instant) (refTicket, rejectReason) {
	m.advance(now)
	t := refTicket{gen: m.gen, state: m.state, start: now.mono, slowAt: int64(m.p.SlowCallDuration)}
	switch {
	case m.state == Closed:
		t.recorded = true
	case m.p.Mode == ModeForcedOpen:
		return t, rejectForcedOpen
	case m.state == HalfOpen && m.inflight < m.p.HalfOpenPermittedCalls:
		m.inflight++
		m.awaiting, m.lastProbe = true, now.mono
		t.recorded = true
	case m.p.Mode == ModeMetricsOnly:
	case m.state == HalfOpen:
		return t, rejectHalfOpenSaturated
	default:
		return t, rejectOpen
	}
	return t, rejectNone
}

func (m *refModel) finish(t refTicket, o observe.Outcome, now instant) observe.Outcome {
	if !t.recorded {
		return observe.OutcomeIgnored
	}
	if t.state == HalfOpen && m.state == HalfOpen {
		m.advance(now) // a probe answering after its period timed out is stale
	}
	if t.gen != m.gen {
		return observe.OutcomeIgnored
	}
	// §5.13: a call that took at least SlowCallDuration (as it stood when the call was
	// admitted) is slow, whatever its outcome.
	slow := t.slowAt > 0 && now.mono-t.start >= t.slowAt
	switch m.state {
	case Closed:
		if o == observe.OutcomeIgnored {
			return o
		}
		m.roll(now)
		m.events = append(m.events, refEvent{idx: m.hi, fail: o == observe.OutcomeFailure, slow: slow})
		if m.p.Mode == ModeForcedClosed {
			return o
		}
		c := m.window()
		enough := c.Calls >= int64(m.p.MinimumThroughput)
		switch {
		case o == observe.OutcomeFailure && enough && float64(c.Failures)/float64(c.Calls) >= m.p.FailureRatio:
			m.toWith(Open, breakerconfig.ReasonTripped, breakerconfig.TriggerFailureRate, c, now, now, 0, 0)
		case m.p.SlowCallDuration > 0 && enough && c.Slow > 0 && float64(c.Slow)/float64(c.Calls) >= m.p.SlowCallRatio:
			m.toWith(Open, breakerconfig.ReasonTripped, breakerconfig.TriggerSlowCallRate, c, now, now, 0, 0)
		}
	case HalfOpen:
		m.inflight--
		m.awaiting = false
		switch {
		case o == observe.OutcomeFailure:
			m.toWith(Open, breakerconfig.ReasonProbeFailed, breakerconfig.TriggerFailedProbe, Counts{Calls: m.probeCalls + 1, Failures: 1, Successes: m.probeSucc, Slow: b2i(slow)}, now, now, 0, 0)
		case o == observe.OutcomeSuccess && slow:
			m.toWith(Open, breakerconfig.ReasonProbeFailed, breakerconfig.TriggerSlowProbe, Counts{Calls: m.probeCalls + 1, Successes: m.probeSucc, Slow: 1}, now, now, 0, 0)
		case o == observe.OutcomeSuccess:
			m.probeCalls++
			m.probeSucc++
			if m.probeSucc >= int64(m.p.SuccessThreshold) {
				m.to(Closed, breakerconfig.ReasonProbesSucceeded, Counts{Calls: m.probeCalls, Successes: m.probeSucc}, now, now)
			}
		}
	}
	return o
}

// trip opens the circuit; on one already open (once time has had its say) it restarts the
// open period, keeping its length, without a transition.
func (m *refModel) trip(now instant) {
	if m.forced() {
		return
	}
	m.advance(now)
	if m.state == Open {
		m.since, m.sinceMono, m.openedAt = now.wall, now.mono, now.wall
		m.restarts++
		return
	}
	m.to(Open, breakerconfig.ReasonManual, m.counts(now), now, now)
}

func (m *refModel) update(p Policy, now instant) {
	p = p.withDefaults()
	if p == m.p {
		return
	}
	if m.state == Closed {
		m.roll(now)
	}
	old := m.p
	m.p = p
	if (old.OpenTimeout != p.OpenTimeout || old.MaxOpenTimeout != p.MaxOpenTimeout) && m.opens > 0 {
		m.openFor = refPeriod(p, m.opens)
	}
	if old.Window != p.Window {
		// The live bucket's outcomes move to the new-width bucket holding now; the previous
		// bucket's stay just before it.
		newHi := m.bucketOf(now.mono)
		for i, e := range m.events {
			m.events[i].idx = newHi - (m.hi - e.idx)
		}
		m.hi = newHi
	}
	switch {
	case p.Mode == ModeForcedOpen && m.state != Open:
		m.to(Open, breakerconfig.ReasonForced, m.counts(now), now, now)
	case p.Mode == ModeForcedClosed && m.state != Closed:
		m.to(Closed, breakerconfig.ReasonForced, m.counts(now), now, now)
	}
}

func (m *refModel) adopt(v Verdict, now instant) bool {
	if m.forced() {
		return false
	}
	// The verdict's open period counts only as far as the local policy's longest one; its
	// count of opens is kept, short of an overflow.
	longest := m.p.OpenTimeout
	if m.p.MaxOpenTimeout > longest {
		longest = m.p.MaxOpenTimeout
	}
	if v.OpenTimeout > longest {
		v.OpenTimeout = longest
	}
	if v.ConsecutiveOpens > 1<<30 {
		v.ConsecutiveOpens = 1 << 30
	}
	// A verdict from the future counts as reached now; one from the past is as old on the
	// monotonic clock as it is on the wall clock.
	w := v.Since.UnixNano()
	future := w > now.wall
	since := now
	if !future {
		since = instant{wall: w, mono: now.mono - (now.wall - w)}
	}
	stale := m.changed && since.wall < m.since
	switch v.State {
	case Open:
		if m.state == Open {
			// An identical verdict changes nothing, and one from the future never re-times
			// an open period already running.
			if !future && since.wall != m.since {
				m.since, m.sinceMono, m.openedAt = since.wall, since.mono, since.wall
			}
			// The verdict's open period, where it carries one.
			if v.ConsecutiveOpens > 0 {
				m.opens = v.ConsecutiveOpens
			}
			if v.OpenTimeout > 0 {
				m.openFor = v.OpenTimeout
			}
			return false
		}
		if stale {
			return false
		}
		m.toWith(Open, breakerconfig.ReasonAdopted, "", m.counts(now), since, now, v.ConsecutiveOpens, v.OpenTimeout)
	case HalfOpen:
		if m.state != Open || stale {
			return false
		}
		m.to(HalfOpen, breakerconfig.ReasonAdopted, m.openTally, since, now)
	case Closed:
		// Stale only against the open period it would end.
		if m.state == Closed || m.changed && since.wall < m.openedAt {
			return false
		}
		m.to(Closed, breakerconfig.ReasonAdopted, m.counts(now), since, now)
	}
	return true
}

func (m *refModel) verdict(now instant) Verdict {
	m.advance(now)
	v := Verdict{State: m.state, Since: time.Unix(0, m.since), ConsecutiveOpens: m.opens}
	if m.state == Open {
		v.OpenTimeout = m.openFor
	}
	return v
}
