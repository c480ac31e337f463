package kube

import (
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/registry"
)

// configureGroup puts the Group g, named name and running p, in the report, as configure
// does a breaker. Its entry's state and figures come from its summary each time the report
// is written.
func (r *reporter) configureGroup(name string, g *registry.Group, p breaker.Policy, generation int64, configErr string) {
	judged := p.SlowCallDuration > 0
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.entry(name)
	e.reported, e.known, e.group = true, true, g
	e.groupForced = p.Mode == breaker.ModeForcedOpen
	e.want.generation = generation
	e.want.configErr = truncate(configErr, maxConfigError)
	e.want.slowJudged = judged
}

// setSummary makes m say what a Group's summary says. The Group is Open while any key is,
// else HalfOpen while any key is, else Closed; since, reason and figures are those of the
// member transition that brought it there, or Started (Forced, for a forced-open
// member created so) when none did.
func (m *member) setSummary(s registry.GroupSummary, forced bool) {
	if s.Reached.Breaker != "" {
		m.setTransition(s.Reached)
	} else {
		m.calls, m.failures, m.slow, m.trigger = 0, 0, 0, ""
		m.consecutiveOpens, m.openTimeout = 0, 0
		m.reason = breakerconfig.ReasonStarted
		if forced {
			m.reason = breakerconfig.ReasonForced
		}
	}
	m.state, m.since = s.State, wireTime(s.Since)
	m.group = true
	m.keys, m.open, m.halfOpen = clampKeys(s.Keys), clampKeys(s.Open), clampKeys(s.HalfOpen)
	m.worst = [breakerconfig.MaxWorstKeys]string{}
	m.nWorst = min(len(s.Worst), breakerconfig.MaxWorstKeys)
	for i := range m.nWorst {
		m.worst[i] = truncate(s.Worst[i], maxWorstKey)
	}
}

// maxWorstKey leaves room under the schema's bound (253 characters) on a key in worst.
const maxWorstKey = 250

// clampKeys keeps a Group's count inside the schema's bound, so that a Group grown past
// it (it may, when every member is open) still gets its report accepted.
func clampKeys(n int) int32 { return int32(min(n, breakerconfig.MaxKeyCount)) }

// refreshGroups brings the entries of Groups up to date with their summaries. Summary
// may deliver transitions to OnTransition, so it runs without r.mu.
func (r *reporter) refreshGroups() {
	type summary struct {
		g      *registry.Group
		s      registry.GroupSummary
		forced bool
	}
	r.mu.Lock()
	sums := map[string]summary{}
	for name, e := range r.entries {
		if e.group != nil && e.reported {
			sums[name] = summary{g: e.group, forced: e.groupForced}
		}
	}
	r.mu.Unlock()
	if len(sums) == 0 {
		return
	}
	for name, s := range sums {
		s.s = s.g.Summary()
		sums[name] = s
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, s := range sums {
		if e := r.entries[name]; e != nil && e.group != nil {
			e.want.setSummary(s.s, s.forced)
		}
	}
}

// groupRefreshInterval is how often the writer re-reads the summaries of the Groups in the
// report. A summary changes with no transition to announce it: keys are created on first
// use and evicted when idle, and an open key's period ends with time, not with a call.
// Re-reading is local; the API server hears of it only when a summary changed.
const groupRefreshInterval = time.Second

// groupRefresh is the writer's ticker for re-reading Group summaries, running only while
// the report holds a Group.
type groupRefresh struct{ t *time.Ticker }

// tick returns the ticker's channel, starting the ticker if armed, or stops it and
// returns nil (never ready) if not.
func (g *groupRefresh) tick(armed bool) <-chan time.Time {
	if !armed {
		g.stop()
		return nil
	}
	if g.t == nil {
		g.t = time.NewTicker(groupRefreshInterval)
	}
	return g.t.C
}

func (g *groupRefresh) stop() {
	if g.t != nil {
		g.t.Stop()
		g.t = nil
	}
}

// reportsGroups reports whether the report holds a Group.
func (r *reporter) reportsGroups() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.entries {
		if e.group != nil && e.reported {
			return true
		}
	}
	return false
}
