package breaker

import "context"

// The call path of a breaker with a candidate (candidate.go): every period published
// while one is set admits as admitShadowed, so a breaker without one never reaches this
// file. The call is admitted by the enforced policy first, as its period's base says; only
// a call that runs is shown to the candidate.

// admitShadowed admits a call as p.base says, counting a refusal for the enforced side,
// then admits it to the candidate.
func (b *Breaker) admitShadowed(ctx context.Context, p *period) (ticket, error) {
	var t ticket
	var err error
	switch p.base {
	case admitClosed:
		t = ticket{p: p, recorded: true}
	case admitLimited:
		t, err = b.slotFor(ctx, p)
	case admitTallied:
		t, err = b.admitTallied(ctx, p)
	case admitOpenUntil:
		if b.now() < p.halfOpenAt {
			err = p.reject
			break
		}
		t, err = b.admitSlow(ctx, false)
	default:
		t, err = b.admitSlow(ctx, false)
	}
	if err != nil {
		// The enforced circuit's refusals; throttling and the concurrency limit refuse on
		// other grounds than the circuit the candidate is compared with.
		if _, limited := limitedIn(err); !limited && err != b.errThrottled {
			p.cand.refused.Add(1)
		}
		return t, err
	}
	// admitSlow may have admitted in a later period, whose candidate is the one to judge
	// (or none, removed meanwhile).
	if c := t.p.cand; c != nil {
		t.sp, t.srecorded = c.admit()
	}
	return t, nil
}

// admit admits a call to the shadow breaker, which in ModeMetricsOnly never refuses: one
// it runs unrecorded is one the candidate would have refused.
func (c *candidate) admit() (*period, bool) {
	st, _ := c.b.admit(context.Background()) // the shadow breaker has no concurrency limit: nothing waits
	if !st.recorded {
		c.wouldRefuse.Add(1)
	}
	return st.p, st.recorded
}

// startOf is when a call admitted as t starts, for the judgements that time it (either
// policy's SlowCallDuration, and the adaptive concurrency limit); 0 when none does.
func (b *Breaker) startOf(t ticket) int64 {
	if t.p.slow != 0 || t.p.adaptive || t.sp != nil && t.sp.slow != 0 {
		return b.callTime(t.p)
	}
	return 0
}

// finishShadow records the outcome of a call admitted as t on the candidate. The call is
// timed on the enforced period's clock (p.exact covers both judgements).
func (b *Breaker) finishShadow(t ticket, err error, panicked bool, start int64) {
	sp := t.sp
	slow := sp.slow != 0 && b.callTime(t.p)-start >= sp.slow
	sh := sp.b
	if err == nil && !panicked && !slow && t.srecorded && sp.admit == admitClosed && sh.recordSuccessFast(sp) {
		return
	}
	sh.finishSlow(ticket{p: sp, recorded: t.srecorded}, sh.classify(err, panicked), slow, err, panicked)
}

// executeShadowed is Execute with a candidate. A closed call neither judgement times, with
// both circuits closed, is Execute's closed path with one more lock-free window add, the
// candidate's; every other call goes through executeSlow.
func (b *Breaker) executeShadowed(ctx context.Context, p *period, fn func(context.Context) error) error {
	sh := p.shadow
	sp := sh.cur.Load()
	switch {
	case !p.untimed || sp.admit != admitClosed:
		return b.executeSlow(ctx, fn)
	case p.base == admitClosed:
	case p.base == admitTallied && p.lim == nil:
		if p.throttleK != 0 && b.throttled(p, b.now()) {
			return b.errThrottled
		}
	default:
		return b.executeSlow(ctx, fn)
	}
	completed := false
	defer func() {
		if !completed {
			b.abandon(ticket{p: p, recorded: true, sp: sp, srecorded: true}, recover(), 0)
		}
	}()
	err := fn(ctx)
	completed = true
	if err == nil {
		// recordSuccessFast for each, written out as Execute writes it; the shadow shares
		// the breaker's clock, so one reading serves both.
		now := b.now()
		if bk := b.bucket.Load(); bk.gen != p.gen || now < bk.start || now >= bk.fastEnd.Load() || !bk.addFast() {
			b.finishClosed(p, nil)
		}
		if bk := sh.bucket.Load(); bk.gen != sp.gen || now < bk.start || now >= bk.fastEnd.Load() || !bk.addFast() {
			sh.finishClosed(sp, nil)
		}
		return nil
	}
	b.finishClosed(p, err)
	sh.finishClosed(sp, err)
	return err
}

// shadowDone is a done func for calls admitted in one enforced period and one period of
// the candidate's, both recorded and neither timed: the commonest pair, closed and
// closed, is then built once and Allow allocates nothing.
type shadowDone struct {
	sp   *period
	done func(error)
}

// allowShadowed is the done func Allow hands out for t, admitted with a candidate.
func (b *Breaker) allowShadowed(t ticket) func(error) {
	if !t.recorded || !t.srecorded || b.startOf(t) != 0 {
		start := b.startOf(t)
		return func(err error) { b.finish(t, err, false, start) }
	}
	if d := t.p.done.Load(); d != nil && d.sp == t.sp {
		return d.done
	}
	d := &shadowDone{sp: t.sp, done: func(err error) { b.finish(t, err, false, 0) }}
	t.p.done.Store(d)
	return d.done
}
