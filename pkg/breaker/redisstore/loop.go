package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
)

// The store's single goroutine does every Redis round trip and every Adopt, one after the
// other: the bindings' epochs need no lock, and a verdict is never applied while the same
// breaker's publish is in flight.
func (s *Store) loop() {
	defer close(s.done)
	ps := s.client.Subscribe(s.ctx, s.cfg.channel)
	msgs := ps.ChannelWithSubscriptions(redis.WithChannelSize(256))
	defer func() {
		_ = ps.Close()
		for range msgs {
			// Wait for go-redis's receiving goroutine to see the close and exit.
		}
	}()

	poll := time.NewTicker(s.cfg.pollInterval)
	defer poll.Stop()
	probe := time.NewTicker(probeInterval)
	probe.Stop()
	probeOn := false

	s.pollAll()
	for {
		s.mu.Lock()
		wantProbe := s.probing
		s.mu.Unlock()
		if wantProbe && !probeOn {
			probe.Reset(probeInterval)
			probeOn = true
		}
		select {
		case <-s.ctx.Done():
			return
		case <-s.wake:
			s.flush()
		case f := <-s.calls:
			f()
		case m, ok := <-msgs:
			if !ok {
				return
			}
			switch m := m.(type) {
			case *redis.Message:
				s.receive(m.Payload)
			case *redis.Subscription:
				// (Re)subscribed: announcements may have been missed meanwhile.
				if m.Kind == "subscribe" {
					s.pollAll()
				}
			}
		case <-poll.C:
			s.scanRegistries()
			s.pollAll()
		case <-probe.C:
			if !s.syncProbes() {
				probe.Stop()
				probeOn = false
			}
		}
	}
}

func (s *Store) op() (context.Context, context.CancelFunc) {
	return context.WithTimeout(s.ctx, s.cfg.opTimeout)
}

// flush publishes what OnTransition and Attach queued.
func (s *Store) flush() {
	s.mu.Lock()
	queue := s.pending
	s.pending = nil
	names := s.unknown
	if len(names) > 0 {
		s.unknown = map[string]struct{}{}
	}
	regs := s.registries
	s.mu.Unlock()

	for name := range names {
		for _, r := range regs {
			if b, ok := r.reg.Lookup(name); ok {
				_ = s.Attach(b, r.key(name))
				break
			}
		}
	}
	for _, bd := range queue {
		bd.queued.Store(false)
		if s.health.Load() == healthDown {
			// The poll retries Redis; until then, remember there is news to publish.
			bd.unsynced = true
			continue
		}
		if !bd.read {
			if !s.readOne(bd) {
				continue
			}
		}
		s.publish(bd)
	}
}

// readOne reconciles a newly attached breaker with what Redis holds.
func (s *Store) readOne(bd *binding) bool {
	r, ok := s.readKey(bd.key)
	if !ok {
		bd.unsynced = true
		return false
	}
	s.reconcile(bd, r)
	return true
}

// readKey reads and validates the verdict under key; ok is false when Redis could not be
// reached.
func (s *Store) readKey(key string) (r readResult, ok bool) {
	ctx, cancel := s.op()
	defer cancel()
	vals, err := s.client.HMGet(ctx, key, fields...).Result()
	switch {
	case isWrongType(err):
		r.garbage = err.Error()
	case err != nil:
		s.failed(err)
		return r, false
	default:
		r = parseRead(vals)
	}
	s.up()
	return r, true
}

type readResult struct {
	v       shared
	found   bool
	garbage string // why the value is not a verdict; "" when it is one or there is none
}

func parseRead(vals []any) readResult {
	v, ok, err := parseHash(vals)
	if err != nil {
		return readResult{garbage: err.Error()}
	}
	return readResult{v: v, found: ok}
}

// isWrongType tells the error Redis answers when the key holds something other than a hash
// from a failure to reach it.
func isWrongType(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "WRONGTYPE")
}

// pollAll re-reads every shared verdict in one pipeline and reconciles each breaker with
// it. It is the safety net for lost announcements and the way back after an outage.
func (s *Store) pollAll() {
	s.mu.Lock()
	var all []*binding
	for _, bds := range s.byKey {
		all = append(all, bds...)
	}
	s.mu.Unlock()

	ctx, cancel := s.op()
	defer cancel()
	if len(all) == 0 {
		if err := s.client.Ping(ctx).Err(); err != nil {
			s.failed(err)
			return
		}
		s.up()
		return
	}
	pipe := s.client.Pipeline()
	cmds := make(map[string]*redis.SliceCmd, len(all))
	for _, bd := range all {
		if _, ok := cmds[bd.key]; !ok {
			cmds[bd.key] = pipe.HMGet(ctx, bd.key, fields...)
		}
	}
	_, _ = pipe.Exec(ctx)
	results := make(map[string]readResult, len(cmds))
	for key, cmd := range cmds {
		vals, err := cmd.Result()
		switch {
		case isWrongType(err):
			results[key] = readResult{garbage: err.Error()}
		case err != nil:
			s.failed(err)
			return
		default:
			results[key] = parseRead(vals)
		}
	}
	s.up()
	for _, bd := range all {
		s.reconcile(bd, results[bd.key])
	}
}

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
		} else if r.v.hos > bd.shared.hos {
			s.adopt(bd, r.v)
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

// casResult is the reply of both scripts.
type casResult struct {
	status  string // ok, conflict, garbage, none
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
	case "none":
		return res, nil
	case "ok", "conflict":
		if len(strs) != 5 {
			break
		}
		res.v, err = parseShared(strs[1], strs[2], strs[3], strs[4])
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
// that lost to an older one of another state (a trip after the fleet closed, a probe failure
// after another process went half-open) is written on top instead: the breaker would
// refuse the older verdict as stale, and it is the newer news.
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
			format, expect, local.State.String(), encodeSince(local.Since), local.HalfOpenSuccesses,
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
			if local.State == breaker.HalfOpen {
				bd.hosSince, bd.localHOS = local.Since, local.HalfOpenSuccesses
			}
			s.clearGarbage(bd.key)
			s.fanOut(bd, res.v)
			if res.v.state == breaker.HalfOpen {
				s.startProbing()
			}
			return
		case "garbage":
			s.reportGarbage(bd.key, res.garbage)
			return
		case "conflict":
			s.conflicts.Add(1)
			if r := res.v; r.state != local.State && r.since.Before(local.Since) {
				expect = r.epoch
				continue
			}
			s.adopt(bd, res.v)
			s.fanOut(bd, res.v)
			return
		}
	}
	bd.unsynced = true // still contested: the next poll tries again
}

// adopt applies a shared verdict to the breaker and records it as the one known. The
// breaker may refuse it (a verdict older than its own state, or a forced mode); then it
// keeps deciding alone until its next transition, which is published on top.
func (s *Store) adopt(bd *binding, v shared) {
	if v.state == breaker.HalfOpen && bd.b.State() == breaker.Closed {
		// A breaker enters half-open only from open, and this one missed the fleet's open
		// period (it was attached, or reconnected, after it). Join it by its end: the
		// observers see closed → open → half-open, all adopted, as the fleet went.
		bd.b.Adopt(breaker.Verdict{State: breaker.Open, Since: v.since})
	}
	bd.b.Adopt(v.verdict())
	bd.known, bd.shared, bd.has = v.epoch, v, true
	lv := localVerdict(bd.b)
	bd.refused = !v.samePeriod(lv)
	if !bd.refused {
		s.adopted.Add(1)
	}
	if lv.State == breaker.HalfOpen && !lv.Since.Equal(bd.hosSince) {
		// A new local half-open period, whose successes so far came with the verdict.
		bd.hosSince, bd.localHOS = lv.Since, lv.HalfOpenSuccesses
	}
	if v.state == breaker.HalfOpen {
		s.startProbing()
	}
}

// offer applies a verdict announced on the channel, or written by a sibling binding, when it
// is newer than the one the breaker knows.
func (s *Store) offer(bd *binding, v shared) {
	if bd.queued.Load() || bd.unsynced || !bd.read {
		return // its publish, or first read, will meet this verdict in Redis
	}
	switch {
	case v.epoch > bd.known:
		s.adopt(bd, v)
	case v.epoch == bd.known && bd.has && v.state == breaker.HalfOpen &&
		bd.shared.state == breaker.HalfOpen && v.since.Equal(bd.shared.since) && v.hos > bd.shared.hos:
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

// receive handles one announcement from the channel. An announcement is only a hint that
// the verdict under its key changed: what is adopted is what the key holds, read and
// validated, so a forged or garbled message can cost a read but never a wrong verdict.
func (s *Store) receive(payload string) {
	key, v, err := parseMessage(payload)
	if err != nil {
		s.garbage.Add(1)
		if now := time.Now(); now.Sub(s.lastGarbageMessageLog) > time.Minute {
			s.lastGarbageMessageLog = now
			s.cfg.logger.Warn("redisstore: ignoring a message that is not a verdict",
				"channel", s.cfg.channel, "err", err)
		}
		return
	}
	s.mu.Lock()
	bds := append([]*binding(nil), s.byKey[key]...)
	nregs := len(s.registries)
	s.mu.Unlock()
	if len(bds) == 0 {
		if nregs > 0 {
			// Perhaps a breaker a registry created since the last scan.
			s.scanRegistries()
			s.flush()
		}
		return
	}
	news := false
	for _, bd := range bds {
		// Skip the read for what this store wrote itself, or already knows.
		news = news || v.epoch > bd.known || v.epoch == bd.known && v.hos > bd.shared.hos
	}
	if !news {
		return
	}
	r, ok := s.readKey(key)
	if !ok {
		return
	}
	for _, bd := range bds {
		if bd.read {
			s.reconcile(bd, r)
		}
	}
}

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

// failed counts a failed round trip, and reports an outage once when it starts.
func (s *Store) failed(err error) {
	if s.ctx.Err() != nil {
		return // closing
	}
	s.errs.Add(1)
	s.lastErr.Store(&err)
	if s.health.Swap(healthDown) != healthDown {
		s.outages.Add(1)
		s.cfg.logger.Warn("redisstore: Redis unreachable; breakers decide alone until it returns",
			"channel", s.cfg.channel, "err", err)
	}
}

// up records a successful round trip, and reports the end of an outage.
func (s *Store) up() {
	if s.health.Swap(healthUp) == healthDown {
		s.cfg.logger.Info("redisstore: Redis reachable again; reconciling shared verdicts by epoch",
			"channel", s.cfg.channel)
	}
}

func (s *Store) reportGarbage(key, why string) {
	s.garbage.Add(1)
	if s.garbageKeys[key] == why {
		return
	}
	s.garbageKeys[key] = why
	s.cfg.logger.Warn("redisstore: ignoring a value that is not a verdict; this breaker decides alone until it is removed",
		"key", key, "reason", why)
}

func (s *Store) clearGarbage(key string) {
	if _, ok := s.garbageKeys[key]; ok {
		delete(s.garbageKeys, key)
		s.cfg.logger.Info("redisstore: key holds a verdict again", "key", key)
	}
}
