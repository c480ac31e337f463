package fleet

import (
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
)

// What the scenarios do to the pods, on every host at once (host_test.go).

// tripLead is how far ahead of now the node hosts are told to trip, so that the call
// reaches every one of them first and they trip together. The host in the harness's
// own process trips at once.
const tripLead = 50 * time.Millisecond

// trip calls Trip() on the named breaker of every pod whose index is a multiple of
// every, and returns when that started and how long the last host took.
func (h *harness) trip(name string, every int) (start time.Time, spread time.Duration) {
	return h.tripProfiled(name, every, "")
}

// tripProfiled is trip, with the node hosts writing a CPU profile of the next 20 s to
// the FLEET_PROFILE directory as profile-host-N.pprof, when both are set.
func (h *harness) tripProfiled(name string, every int, profile string) (start time.Time, spread time.Duration) {
	if h.s.profile == "" {
		profile = ""
	}
	start = time.Now()
	if h.nodes > 0 {
		start = start.Add(tripLead)
	}
	done := make([]int64, len(h.fleet))
	if err := h.fleet.each("Trip", same(TripArgs{Breaker: name, Every: every, At: start.UnixNano(), Profile: profile}), func(i int) any { return &done[i] }); err != nil {
		h.t.Fatal(err)
	}
	last := start
	for _, d := range done {
		if t := time.Unix(0, d); t.After(last) {
			last = t
		}
	}
	return start, last.Sub(start)
}

// use has every pod use the named breakers.
func (h *harness) use(names ...string) {
	if err := h.fleet.each("Use", same(names), func(int) any { return &Empty{} }); err != nil {
		h.t.Fatal(err)
	}
}

// waitState waits until every pod's named breaker is in state, and returns how long
// after start the last host saw its pods all there; ok is false if one did not by the
// deadline.
func (h *harness) waitState(name string, state breaker.State, start, deadline time.Time) (time.Duration, bool) {
	replies := make([]WaitReply, len(h.fleet))
	if err := h.fleet.each("Wait", same(WaitArgs{Breaker: name, State: state, Deadline: deadline.UnixNano()}), func(i int) any { return &replies[i] }); err != nil {
		logf("wait for %s %s: %v", name, state, err)
		return 0, false
	}
	var last int64
	for _, r := range replies {
		if r.Left > 0 {
			return 0, false
		}
		last = max(last, r.At)
	}
	return time.Unix(0, last).Sub(start), true
}

// waitPolicy waits until every pod's named breaker runs failure ratio ratio, and
// returns each pod's time from start and how many did not get there by the deadline.
func (h *harness) waitPolicy(name string, ratio float64, start, deadline time.Time) (perPod []time.Duration, left int) {
	replies := make([]PolicyReply, len(h.fleet))
	args := PolicyArgs{Breaker: name, Ratio: ratio, Start: start.UnixNano(), Deadline: deadline.UnixNano()}
	if err := h.fleet.each("WaitPolicy", same(args), func(i int) any { return &replies[i] }); err != nil {
		h.t.Fatal(err)
	}
	for _, r := range replies {
		perPod = append(perPod, r.PerPod...)
		left += r.Left
	}
	return perPod, left
}

// recoverPods closes every pod's named breaker with successful calls, and returns how
// many still refused at the deadline.
func (h *harness) recoverPods(name string, deadline time.Time) int {
	open := make([]int, len(h.fleet))
	if err := h.fleet.each("Recover", same(RecoverArgs{Breaker: name, Deadline: deadline.UnixNano()}), func(i int) any { return &open[i] }); err != nil {
		h.t.Fatal(err)
	}
	n := 0
	for _, o := range open {
		n += o
	}
	return n
}

// busy is the last moment a pod's or an agent's write was in flight or waiting.
func (h *harness) busy() time.Time { return time.Unix(0, h.fleet.stats().Busy) }
