package redisstore

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
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

	s.pollAll()
	for {
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
		news = news || v.epoch > bd.known
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
