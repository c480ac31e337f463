package kube

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// Traffic (docs/design.md §7): for a breaker with a retry budget or adaptive throttling,
// the report also carries what the breaker's window holds, which the operator aggregates
// over the fleet and publishes back (rendered fleet: the pod count that divides the retry
// floor, the median pod's requests and accepts, which a quiet pod throttles on).
//
// Traffic changes with every call, and a report write costs the API server and wakes the
// operator, so a change of traffic alone is bounded twice:
//   - in time: at most once per window (the shortest window among the pod's breakers that
//     report traffic), jittered up to a quarter window later so that a fleet started
//     together does not write together;
//   - in size: only when it moved materially (trafficMoved): requests by at least 10 % of
//     what was last written, or the accepted, retried or throttled share of requests by
//     at least 2 points, or from none to some or back. Smaller moves change no decision
//     a pod makes from the fleet's figures by more than the noise of a window.
//
// A write for any other cause (an earned state, a new config generation, a held
// unearned change whose hold ended) carries the latest traffic, and restarts the wait.

// traffic is what the report says of a breaker's window. on: the breaker reports it.
// inFlight is its concurrency limit's part (inflight.go), sampled and written with it.
type traffic struct {
	on                                    bool
	requests, accepts, retries, throttled int64
	inFlight                              inFlight
}

// sampled says which parts of its window an entry carries: traffic for a breaker with a
// retry budget or throttling, concurrency for one with a concurrency limit.
type sampled struct{ traffic, concurrency bool }

func (s sampled) any() bool { return s.traffic || s.concurrency }

// trafficOf is what the report says of t, of the parts s carries: each count inside the
// schema's bound, and accepts, retries and throttled at most the requests, as the schema
// requires. Retries are counted when allowed and their calls when they finish, so a window
// read while retries are in flight can hold more retries than requests.
func trafficOf(t breaker.Traffic, s sampled) traffic {
	var out traffic
	if s.traffic {
		c := func(n int64) int64 { return min(max(n, 0), breakerconfig.MaxTrafficCount) }
		requests := c(t.Requests)
		out = traffic{on: true, requests: requests, accepts: min(c(t.Accepts), requests), retries: min(c(t.Retries), requests), throttled: min(c(t.Throttled), requests)}
	}
	if s.concurrency {
		out.inFlight = inFlightOf(t)
	}
	return out
}

// only is t with the parts s does not carry left out.
func (t traffic) only(s sampled) traffic {
	if !s.traffic {
		t = traffic{inFlight: t.inFlight}
	}
	if !s.concurrency {
		t.inFlight = inFlight{}
	}
	return t
}

// Thresholds of a material move of traffic.
const (
	trafficVolumeMove = 0.10
	trafficShareMove  = 0.02
)

// trafficMoved reports whether now differs materially from was, in its window or its
// concurrency figures.
func trafficMoved(was, now traffic) bool {
	return windowMoved(was, now) || inFlightMoved(was.inFlight, now.inFlight)
}

// windowMoved reports whether the window of now differs materially from was's.
func windowMoved(was, now traffic) bool {
	if was.on != now.on {
		return true
	}
	if was.requests == 0 || now.requests == 0 {
		return was.requests != now.requests
	}
	// In float64, whose rounding must not decide a move of exactly the threshold.
	const slack = 1e-9
	if math.Abs(float64(now.requests-was.requests)) >= trafficVolumeMove*float64(was.requests)-slack {
		return true
	}
	share := func(n, of int64) float64 { return float64(n) / float64(of) }
	for _, d := range []float64{
		share(now.accepts, now.requests) - share(was.accepts, was.requests),
		share(now.retries, now.requests) - share(was.retries, was.requests),
		share(now.throttled, now.requests) - share(was.throttled, was.requests),
	} {
		if math.Abs(d) >= trafficShareMove-slack {
			return true
		}
	}
	return false
}

// trafficEntries returns the reported breakers whose traffic the report carries, and the
// shortest of their windows. Caller holds mu.
func (r *reporter) trafficEntries() (map[string]*breaker.Breaker, time.Duration) {
	var bs map[string]*breaker.Breaker
	var window time.Duration
	for name, e := range r.entries {
		if e.reported && e.breaker != nil {
			if bs == nil {
				bs = map[string]*breaker.Breaker{}
			}
			bs[name] = e.breaker
			if window == 0 || e.window < window {
				window = e.window
			}
		}
	}
	return bs, window
}

// refreshTraffic samples the window of every breaker whose traffic the report carries.
// Traffic takes the breaker's lock, so it runs without r.mu, as refreshGroups does.
func (r *reporter) refreshTraffic() {
	r.mu.Lock()
	bs, _ := r.trafficEntries()
	r.mu.Unlock()
	if len(bs) == 0 {
		return
	}
	latest := make(map[string]traffic, len(bs))
	for name, b := range bs {
		latest[name] = trafficOf(b.Traffic(), r.sampledOf(name))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, t := range latest {
		if e := r.entries[name]; e != nil && e.breaker != nil {
			e.latest = t
		}
	}
}

// sampledOf is what the entry of name carries. It takes mu.
func (r *reporter) sampledOf(name string) sampled {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.entries[name]; e != nil {
		return e.sampled
	}
	return sampled{}
}

// takeTraffic puts the latest traffic of every entry of names into the report ms (and
// the entries' want). Caller holds mu.
func (r *reporter) takeTraffic(names []string, ms []member) {
	for i, name := range names {
		if e := r.entries[name]; e.breaker != nil {
			e.want.traffic = e.latest
			ms[i].traffic = e.latest
		}
	}
}

// trafficDue reports whether a change of traffic alone may go out now and one of names
// moved materially since it was last taken. Caller holds mu.
func (r *reporter) trafficDue(now time.Time, names []string) bool {
	if now.Before(r.nextTraffic) {
		return false
	}
	if r.candidatesMoved(names) {
		return true
	}
	for _, name := range names {
		if e := r.entries[name]; e.breaker != nil && trafficMoved(e.want.traffic, e.latest) {
			return true
		}
	}
	return false
}

// trafficWritten starts the wait before the next change of traffic alone, after a write
// that changed the report's traffic. Caller holds mu.
func (r *reporter) trafficWritten(now time.Time, was, ms []member) {
	changed := len(was) != len(ms)
	for i := 0; !changed && i < len(ms); i++ {
		changed = was[i].traffic != ms[i].traffic || was[i].candidate.counts != ms[i].candidate.counts
	}
	if !changed {
		return
	}
	if window := r.sampledWindow(); window > 0 {
		r.nextTraffic = now.Add(window + rand.N(window/4+1))
	}
}

// trafficCheck is when the writer next looks at the traffic: when the wait after the last
// traffic write ends, then every quarter window while nothing moved. It returns false
// when the report carries no traffic.
func (r *reporter) trafficCheck(now time.Time) (time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	window := r.sampledWindow()
	if window <= 0 {
		return 0, false
	}
	if wait := r.nextTraffic.Sub(now); wait > 0 {
		return wait, true
	}
	return window / 4, true
}

// sampledWindow is the shortest window among the reported breakers whose traffic or
// candidate the report carries, 0 when it carries neither. Caller holds mu.
func (r *reporter) sampledWindow() time.Duration {
	_, window := r.trafficEntries()
	if w := r.candidateWindow(); w > 0 && (window == 0 || w < window) {
		window = w
	}
	return window
}

// trafficTimer is the writer's timer for looking at the traffic, armed only while the
// report carries some.
type trafficTimer struct{ t *time.Timer }

// after returns a channel ready after d, or nil (never ready) when not armed.
func (tt *trafficTimer) after(d time.Duration, armed bool) <-chan time.Time {
	if !armed {
		tt.stop()
		return nil
	}
	if tt.t == nil {
		tt.t = time.NewTimer(d)
	} else {
		tt.t.Reset(d)
	}
	return tt.t.C
}

func (tt *trafficTimer) stop() {
	if tt.t != nil {
		tt.t.Stop()
		tt.t = nil
	}
}
