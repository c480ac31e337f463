package redisstore

import (
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
)

// Probes: sharing the half-open successes counted so far, sampled while some breaker is
// half-open.

func (s *Store) startProbing() {
	s.mu.Lock()
	s.probing = true
	s.mu.Unlock()
}

// syncProbes adds the local half-open successes counted since the last sample to the shared
// count, and reports whether any breaker is still half-open.
func (s *Store) syncProbes() bool {
	s.mu.Lock()
	var all []*binding
	for _, bds := range s.byKey {
		all = append(all, bds...)
	}
	s.probing = false
	s.mu.Unlock()

	any := false
	for _, bd := range all {
		local := localVerdict(bd.b)
		if local.State != breaker.HalfOpen {
			continue
		}
		any = true
		if !local.Since.Equal(bd.hosSince) {
			bd.hosSince, bd.localHOS = local.Since, 0
		}
		// Successes count toward the shared half-open period even when this breaker went
		// half-open by itself, a little apart from it: each is evidence of recovery.
		if !bd.has || bd.shared.state != breaker.HalfOpen || bd.queued.Load() || bd.unsynced ||
			local.HalfOpenSuccesses <= bd.localHOS || forced(bd.b) || s.health.Load() == healthDown {
			continue
		}
		n := local.HalfOpenSuccesses - bd.localHOS
		res, err := s.runScript(probeScript, bd.key,
			format, bd.known, encodeSince(bd.shared.since), n, bd.b.Policy().SuccessThreshold,
			encodeSince(time.Now()), s.cfg.ttl.Milliseconds(), s.cfg.channel, s.writer)
		if err != nil {
			s.failed(err)
			continue
		}
		s.up()
		switch res.status {
		case "ok":
			s.published.Add(1)
			bd.localHOS = local.HalfOpenSuccesses
			if res.v.epoch > bd.known {
				s.adopt(bd, res.v) // the fleet's successes closed the circuit
			} else {
				bd.shared = res.v
			}
			s.fanOut(bd, res.v)
		case "conflict":
			s.conflicts.Add(1)
			s.offer(bd, res.v)
		case "none":
			s.publish(bd)
		case "garbage":
			s.reportGarbage(bd.key, res.garbage)
		}
	}
	if any {
		s.startProbing()
	}
	return any
}
