package redisstore

// Health: whether Redis is reachable, and what under the store's keys is not a verdict.
// Only the loop goroutine calls these.

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
