package redisstore

import (
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
)

// Epochs: reconciling a breaker with the shared verdict, and the compare-and-set that
// publishes a local verdict on top of the epoch this process last knew.

// reconcile brings one breaker and the shared verdict together, by epoch: a newer shared
// verdict is adopted, local news (or a store that lost data) is published.
func (s *Store) reconcile(bd *binding, r readResult) {
	if bd.queued.Load() {
		return // flush reads and publishes it, and resolves any conflict then
	}
	bd.read = true
	if r.garbage != "" {
		s.reportGarbage(bd.key, r.garbage)
		bd.unsynced = false
		return
	}
	s.clearGarbage(bd.key)
	local := localVerdict(bd.b)
	// News is a local verdict that could not be published while Redis was unreachable.
	news := bd.unsynced && bd.differs(local)
	bd.unsynced = false
	switch {
	case !r.found:
		// No shared verdict (never written, expired, or lost with a Redis restart): an open
		// or half-open circuit, or one that moved since it was shared, is written again.
		if bd.differs(local) || local.State != breaker.Closed {
			s.publish(bd)
		}
	case news:
		s.publish(bd) // the compare-and-set decides between it and the shared verdict
	case r.v.epoch > bd.known:
		s.adopt(bd, r.v)
	case r.v.epoch == bd.known:
		if !r.v.samePeriod(local) && !bd.refused {
			// The local verdict moved without a transition reaching the store (a breaker
			// created without the store as its observer).
			s.publish(bd)
		}
	default:
		// Redis holds an older epoch than this process has seen: it lost data. Write
		// again what this process knows.
		if !r.v.samePeriod(local) {
			s.publish(bd)
		}
	}
}

// differs reports whether the local verdict is news to the shared one. With nothing shared
// yet, only a circuit that is not closed is: a closed one is what no verdict means.
func (bd *binding) differs(local breaker.Verdict) bool {
	if bd.has {
		return !bd.shared.samePeriod(local)
	}
	return local.State != breaker.Closed
}

// localVerdict is b's verdict as it reads after a trip through Redis.
func localVerdict(b *breaker.Breaker) breaker.Verdict {
	v := b.Verdict()
	v.Since = roundSince(v.Since)
	return v
}

func forced(b *breaker.Breaker) bool {
	m := b.Policy().Mode
	return m == breaker.ModeForcedOpen || m == breaker.ModeForcedClosed
}

// casResult is the reply of the compare-and-set script.
type casResult struct {
	status  string // ok, conflict, garbage
	v       shared
	garbage string
}

func (s *Store) runScript(sc *redis.Script, key string, args ...any) (casResult, error) {
	ctx, cancel := s.op()
	defer cancel()
	reply, err := sc.Run(ctx, s.client, []string{key}, args...).Slice()
	if err != nil {
		return casResult{}, err
	}
	strs := make([]string, len(reply))
	for i, x := range reply {
		switch x := x.(type) {
		case string:
			strs[i] = x
		case int64:
			strs[i] = strconv.FormatInt(x, 10)
		}
	}
	res := casResult{status: strs[0]}
	switch res.status {
	case "garbage":
		if len(strs) > 1 {
			res.garbage = "holds " + strs[1]
		}
		return res, nil
	case "ok", "conflict":
		if len(strs) != 6 {
			break
		}
		res.v, err = parseShared(strs[1], strs[2], strs[3], strs[4])
		if err == nil {
			res.v, err = parsePeriod(res.v, strs[5])
		}
		if err != nil {
			return casResult{status: "garbage", garbage: err.Error()}, nil
		}
		return res, nil
	}
	return casResult{}, fmt.Errorf("redisstore: unexpected script reply %q", reply)
}

// publish writes the breaker's verdict if it differs from the shared one, by a
// compare-and-set on the epoch this process last knew. The loser of a race adopts the
// winner's verdict, so two processes that open together produce one open period. A verdict
// that lost to one it supersedes (see supersedes) is written on top instead.
func (s *Store) publish(bd *binding) {
	bd.refused = false
	if forced(bd.b) {
		// The mode is local configuration; the verdict it forces is not a judgement to share.
		bd.unsynced = false
		return
	}
	local := localVerdict(bd.b)
	if !bd.differs(local) {
		bd.unsynced = false
		return
	}
	expect := bd.known
	for range 3 {
		res, err := s.runScript(casScript, bd.key,
			format, expect, local.State.String(), encodeSince(local.Since), 0,
			local.ConsecutiveOpens, int64(local.OpenTimeout),
			s.cfg.ttl.Milliseconds(), s.cfg.channel, s.writer)
		if err != nil {
			bd.unsynced = true
			s.failed(err)
			return
		}
		s.up()
		bd.unsynced = false
		switch res.status {
		case "ok":
			s.published.Add(1)
			bd.known, bd.shared, bd.has = res.v.epoch, res.v, true
			s.clearGarbage(bd.key)
			s.fanOut(bd, res.v)
			return
		case "garbage":
			s.reportGarbage(bd.key, res.garbage)
			return
		case "conflict":
			s.conflicts.Add(1)
			if supersedes(local, res.v) {
				expect = res.v.epoch
				continue
			}
			s.adopt(bd, res.v)
			s.fanOut(bd, res.v)
			return
		}
	}
	bd.unsynced = true // still contested: the next poll tries again
}

// supersedes reports whether the local verdict, having lost the compare-and-set to the
// shared one, is still the news to write on top of it. So it is when the shared verdict is
// of another state and older (a trip after the fleet closed, a probe failure after another
// process went half-open): the breaker would refuse it as stale. And so it is at an equal
// timestamp when the local state was earned and the shared one was not: a HalfOpen is only
// ever the clock's doing (or another process's adoption of it), a Closed only ever earned by
// probes, and an Open either (calls, a failed probe, Trip, or a half-open period whose
// probes never answered), so at one instant Closed beats Open beats HalfOpen. A probe that
// closed the circuit at the very instant another process's open period ended must not be
// undone by that end; and were a failed probe and a successful one to tie to the
// nanosecond, the close wins and the failing process opens again on its next failures.
func supersedes(local breaker.Verdict, shared shared) bool {
	if shared.state == local.State {
		return false
	}
	if shared.since.Before(local.Since) {
		return true
	}
	return shared.since.Equal(local.Since) && earnedRank(local.State) > earnedRank(shared.state)
}

// earnedRank orders states by how surely a process earned them, for ties (supersedes).
func earnedRank(s breaker.State) int {
	switch s {
	case breaker.Closed:
		return 2
	case breaker.Open:
		return 1
	}
	return 0
}

// adopt applies a shared verdict to the breaker and records it as the one known. The
// breaker may refuse it (a verdict older than its own state, or a forced mode); then it
// keeps deciding alone until its next transition, which is published on top.
func (s *Store) adopt(bd *binding, v shared) {
	if lv := localVerdict(bd.b); v.state == breaker.HalfOpen && lv.State == breaker.Closed && !v.since.Equal(lv.Since) {
		// A breaker enters half-open only from open, and this one missed the fleet's open
		// period (it was attached, or reconnected, after it). Join it by its end: the
		// observers see closed → open → half-open, all adopted, as the fleet went. A close
		// at the very instant the half-open period began ended that period (supersedes).
		bd.b.Adopt(breaker.Verdict{State: breaker.Open, Since: v.since})
	}
	bd.b.Adopt(v.verdict())
	bd.known, bd.shared, bd.has = v.epoch, v, true
	lv := localVerdict(bd.b)
	bd.refused = !v.samePeriod(lv)
	if !bd.refused {
		s.adopted.Add(1)
	}
}

// offer applies a verdict announced on the channel, or written by a sibling binding, when it
// is newer than the one the breaker knows.
func (s *Store) offer(bd *binding, v shared) {
	if bd.queued.Load() || bd.unsynced || !bd.read {
		return // its publish, or first read, will meet this verdict in Redis
	}
	if v.epoch > bd.known {
		s.adopt(bd, v)
	}
}

// fanOut hands a verdict this store wrote or learnt to the other breakers attached under
// the same key, without waiting for the announcement to come back.
func (s *Store) fanOut(from *binding, v shared) {
	s.mu.Lock()
	siblings := append([]*binding(nil), s.byKey[from.key]...)
	s.mu.Unlock()
	for _, bd := range siblings {
		if bd != from {
			s.offer(bd, v)
		}
	}
}
