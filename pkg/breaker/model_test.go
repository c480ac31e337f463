package breaker

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/observe"
)

// modelPolicy draws a valid policy from small values, so that thresholds are reached often.
func modelPolicy(r *rand.Rand) Policy {
	pick := func(xs ...int) int { return xs[r.IntN(len(xs))] }
	modes := []Mode{"", ModeEnforce, ModeEnforce, ModeEnforce, ModeMetricsOnly, ModeForcedOpen, ModeForcedClosed}
	openTimeout := time.Duration(pick(1, 3, 10)) * time.Second
	return Policy{
		OpenTimeout:            openTimeout,
		SlowCallDuration:       []time.Duration{0, 0, time.Millisecond, 100 * time.Millisecond, time.Second, 2 * time.Second}[r.IntN(6)],
		SlowCallRatio:          []float64{0.25, 0.5, 1}[r.IntN(3)],
		MaxOpenTimeout:         openTimeout * time.Duration(pick(0, 0, 1, 2, 8, 100)),
		Window:                 time.Duration(pick(1, 2, 5, 10)) * time.Second,
		FailureRatio:           []float64{0.25, 0.3, 0.5, 0.5, 1}[r.IntN(5)],
		MinimumThroughput:      pick(1, 2, 3, 5),
		SuccessThreshold:       pick(1, 2, 3),
		HalfOpenPermittedCalls: pick(1, 1, 2),
		Mode:                   modes[r.IntN(len(modes))],
	}
}

type liveCall struct {
	done func(error)
	ref  refTicket
	// cref is the call's ticket in the candidate's model, for a call the candidate of
	// epoch cepoch saw (shown is false when there was none).
	cref   refTicket
	cepoch int
	shown  bool
}

// modelCandidate is the reference for a candidate (§11): the reference model of its
// policy in ModeMetricsOnly, fed the calls the breaker ran, and the counts Candidate
// reports. epoch tells candidates apart: a call admitted under one another replaced is
// not the new one's.
type modelCandidate struct {
	m                  *refModel
	opens, wouldRefuse int64
	epoch              int
}

// set sets p as the candidate; one equal to the candidate already set changes nothing.
func (c *modelCandidate) set(b *Breaker, p Policy, now instant) error {
	if err := b.SetCandidate(&p); err != nil {
		return err
	}
	p = p.withDefaults()
	p.Mode, p.RetryBudget, p.Throttle = ModeMetricsOnly, nil, nil
	if c.m != nil && c.m.p == p {
		return nil
	}
	c.m, c.opens, c.wouldRefuse = newRefModel(p, now), 0, 0
	c.epoch++
	return nil
}

// admit shows the candidate a call the breaker admitted.
func (c *modelCandidate) admit(lc *liveCall, now instant) {
	if c.m == nil {
		return
	}
	lc.cref, _ = c.m.admit(now)
	lc.cepoch, lc.shown = c.epoch, true
	if !lc.cref.recorded {
		c.wouldRefuse++
	}
}

func (c *modelCandidate) finish(lc liveCall, o observe.Outcome, now instant) {
	if c.m != nil && lc.shown && lc.cepoch == c.epoch {
		c.m.finish(lc.cref, o, now)
	}
}

// drain counts the candidate's opens from the transitions its model made.
func (c *modelCandidate) drain() {
	if c.m == nil {
		return
	}
	for _, tr := range c.m.transitions {
		if tr.To == Open {
			c.opens++
		}
	}
	c.m.transitions = nil
}

// TestModel drives the breaker and the reference model with the same random sequences of
// calls, outcomes, calls whose done never comes (leaked probes), clock moves, Trip, Update
// (modes included) and Adopt, and compares them after every step: admission, outcome,
// State, Counts, Verdict and every transition.
func TestModel(t *testing.T) {
	oneGoroutine(t)
	t.Parallel() // the longest tests of the package, on the CPU alone: each sequence has its own fake clock
	// 5,000 sequences each with and without a call observer (which takes the locked path
	// for every call): 10,000 in all.
	sequences, steps := 5000, 120
	if testing.Short() {
		sequences = 300
	}
	for _, observed := range []bool{false, true} {
		t.Run(fmt.Sprintf("callObserver=%v", observed), func(t *testing.T) {
			t.Parallel()
			var reached modelReach
			for seed := range uint64(sequences) {
				reached.add(runModelSequence(t, seed, steps, observed, false))
				if t.Failed() {
					return
				}
			}
			// The sequences must reach every rule, or the comparison says nothing about it.
			t.Logf("reached: %+v", reached)
			if reached.leakReopens == 0 || reached.slowTrips == 0 || reached.slowProbes == 0 || reached.backedOff == 0 || reached.adoptedPeriods == 0 ||
				reached.clampedPeriods == 0 || reached.tripRestarts == 0 {
				t.Fatalf("some rule was never reached: %+v", reached)
			}
		})
	}
}

// modelReach counts how often the sequences reached the rules that random steps reach
// least easily.
type modelReach struct {
	leakReopens    int // half-open → open over a leaked probe
	slowTrips      int // opened on the slow-call rate
	slowProbes     int // re-opened by a slow probe
	backedOff      int // an open period longer than OpenTimeout
	adoptedPeriods int // an open period taken from a verdict
	clampedPeriods int // a verdict's open period cut to the policy's longest
	tripRestarts   int // Trip on an open circuit: the period restarts, no transition
	// With a candidate: its opens, its closes and the calls it would have refused.
	candidateOpens, candidateCloses, wouldRefuse int
}

func (r *modelReach) add(o modelReach) {
	r.leakReopens += o.leakReopens
	r.slowTrips += o.slowTrips
	r.slowProbes += o.slowProbes
	r.backedOff += o.backedOff
	r.adoptedPeriods += o.adoptedPeriods
	r.clampedPeriods += o.clampedPeriods
	r.tripRestarts += o.tripRestarts
	r.candidateOpens += o.candidateOpens
	r.candidateCloses += o.candidateCloses
	r.wouldRefuse += o.wouldRefuse
}

// TestModelWithCandidate is TestModel with a candidate policy judged in shadow (§11),
// replaced now and then: the breaker must behave exactly as without one, and the
// candidate as the reference model of its policy in ModeMetricsOnly fed the calls that
// ran, its state, since, opens and wouldRefuse compared as the breaker's are.
func TestModelWithCandidate(t *testing.T) {
	oneGoroutine(t)
	t.Parallel()
	sequences, steps := 3000, 120
	if testing.Short() {
		sequences = 200
	}
	for _, observed := range []bool{false, true} {
		t.Run(fmt.Sprintf("callObserver=%v", observed), func(t *testing.T) {
			t.Parallel()
			var reached modelReach
			for seed := range uint64(sequences) {
				reached.add(runModelSequence(t, seed, steps, observed, true))
				if t.Failed() {
					return
				}
			}
			t.Logf("reached: %+v", reached)
			if reached.candidateOpens == 0 || reached.wouldRefuse == 0 || reached.candidateCloses == 0 {
				t.Fatalf("the candidate never opened, refused or closed again: %+v", reached)
			}
		})
	}
}

// runModelSequence runs one sequence, with a candidate policy if withCandidate, and
// reports which rules it reached.
func runModelSequence(t *testing.T, seed uint64, steps int, observed, withCandidate bool) (reached modelReach) {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	clock := newFakeClock()
	clock.Advance(time.Duration(r.Int64N(int64(time.Hour))))
	rec := &recorder{}
	var obs observe.Observer = transitionsOnly{rec}
	if observed {
		obs = rec
	}
	classifier := func(err error) bool {
		return err != nil && !errors.Is(err, errBenign) && !errors.Is(err, context.Canceled)
	}
	p := modelPolicy(r)
	b, err := New("model", p, WithClock(clock), WithObserver(obs), WithClassifier(classifier))
	if err != nil {
		t.Fatal(err)
	}
	// The breaker's monotonic timeline starts at its clock's wall time when it is created.
	base, mono0 := clock.Now().UnixNano(), clock.Monotonic()
	now := func() instant {
		return instant{wall: clock.Now().UnixNano(), mono: base + int64(clock.Monotonic()-mono0)}
	}
	m := newRefModel(p, now())
	var cand modelCandidate
	if withCandidate {
		if err := cand.set(b, modelPolicy(r), now()); err != nil {
			t.Fatal(err)
		}
	}
	var calls []liveCall
	var log strings.Builder
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d (observed=%v): "+format+"\nsteps:\n%s", append([]any{seed, observed}, append(args, log.String())...)...)
	}
	outcomes := []struct {
		err error
		o   observe.Outcome
	}{{nil, observe.OutcomeSuccess}, {nil, observe.OutcomeSuccess}, {errBoom, observe.OutcomeFailure}, {errBoom, observe.OutcomeFailure}, {context.Canceled, observe.OutcomeIgnored}, {errBenign, observe.OutcomeSuccess}}

	for step := range steps {
		switch k := r.IntN(100); {
		case k < 35: // a call starts
			done, err := b.Allow()
			tk, reason := m.admit(now())
			fmt.Fprintf(&log, "%d allow -> %v (model %v)\n", step, err, reason)
			if (err == nil) != (reason == rejectNone) {
				fail("Allow: breaker err %v, model reject %q", err, reason)
			}
			if err != nil {
				oe, ok := errors.AsType[*openError](err)
				if !ok || !errors.Is(err, ErrOpen) || oe.reason != reason {
					fail("Allow: error %v, want reason %q", err, reason)
				}
				break
			}
			lc := liveCall{done: done, ref: tk}
			cand.admit(&lc, now())
			calls = append(calls, lc)
		case k < 65: // a call ends
			if len(calls) == 0 {
				break
			}
			i := r.IntN(len(calls))
			c := calls[i]
			calls = append(calls[:i], calls[i+1:]...)
			if r.IntN(8) == 0 {
				// Its done is never called: a leaked call, a leaked probe if half-open.
				fmt.Fprintf(&log, "%d drop (gen %d, %v)\n", step, c.ref.gen, c.ref.state)
				break
			}
			oc := outcomes[r.IntN(len(outcomes))]
			before := len(rec.ends)
			c.done(oc.err)
			want := m.finish(c.ref, oc.o, now())
			cand.finish(c, oc.o, now())
			fmt.Fprintf(&log, "%d done(%v) -> %v\n", step, oc.err, want)
			if observed {
				if len(rec.ends) != before+1 || rec.ends[before].Outcome != want {
					fail("done: call events %v, want outcome %v", rec.ends[before:], want)
				}
			}
		case k < 80: // time passes
			ds := []time.Duration{0, 1, time.Millisecond, 100 * time.Millisecond, 999 * time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second, 11 * time.Second}
			d := ds[r.IntN(len(ds))]
			if r.IntN(4) == 0 {
				d = time.Duration(r.Int64N(int64(12 * time.Second)))
			}
			if r.IntN(8) == 0 {
				// The wall clock is stepped (NTP, a VM resumed): no time passes.
				d = time.Duration(r.Int64N(int64(2*time.Hour))) - time.Hour
				clock.StepWall(d)
				fmt.Fprintf(&log, "%d step wall clock %v\n", step, d)
				break
			}
			clock.Advance(d)
			fmt.Fprintf(&log, "%d advance %v\n", step, d)
		case k < 84:
			b.Trip()
			m.trip(now())
			fmt.Fprintf(&log, "%d trip\n", step)
		case k < 90:
			np := modelPolicy(r)
			if err := b.Update(np); err != nil {
				fail("Update: %v", err)
			}
			m.update(np, now())
			fmt.Fprintf(&log, "%d update %+v\n", step, np)
			if withCandidate && r.IntN(3) == 0 {
				cp := modelPolicy(r)
				if err := cand.set(b, cp, now()); err != nil {
					fail("SetCandidate: %v", err)
				}
				fmt.Fprintf(&log, "%d candidate %+v\n", step, cp)
			}
		case k < 95:
			v := Verdict{State: State(r.IntN(3))}
			if v.State == Open && r.IntN(2) == 0 {
				// A verdict that carries its open period (§5.13), as the fleet's and the
				// Redis store's do.
				v.ConsecutiveOpens = 1 + r.IntN(5)
				v.OpenTimeout = time.Duration(1+r.IntN(20)) * time.Second
				if r.IntN(8) == 0 {
					// A verdict no policy here allows (§5.12): a century, a count past any backoff.
					v.ConsecutiveOpens, v.OpenTimeout = 1<<40, 876000*time.Hour
				}
			}
			switch r.IntN(4) {
			case 0:
				v.Since = m.verdict(now()).Since // maybe identical
				b.Verdict()
			case 1:
				v.Since = clock.Now().Add(-time.Duration(r.Int64N(int64(15 * time.Second))))
			case 2:
				v.Since = clock.Now().Add(time.Duration(1 + r.Int64N(int64(15*time.Second)))) // a clock ahead
			default:
				v.Since = clock.Now()
			}
			got, want := b.Adopt(v), m.adopt(v, now())
			if v.OpenTimeout == 876000*time.Hour && m.state == Open && m.openFor == max(m.p.OpenTimeout, m.p.MaxOpenTimeout) {
				reached.clampedPeriods++
			}
			fmt.Fprintf(&log, "%d adopt %v since %v -> %v\n", step, v.State, v.Since.UnixNano(), want)
			if got != want {
				fail("Adopt(%+v) = %v, model %v", v, got, want)
			}
		default: // a call through Execute that panics
			func() {
				defer func() { _ = recover() }()
				tk, reason := m.admit(now())
				if reason == rejectNone {
					m.finish(tk, observe.OutcomeFailure, now())
					var lc liveCall
					cand.admit(&lc, now())
					cand.finish(lc, observe.OutcomeFailure, now())
				}
				err := b.Execute(context.Background(), func(context.Context) error { panic("boom") })
				if reason == rejectNone || !errors.Is(err, ErrOpen) {
					fail("Execute returned %v without re-raising the panic; model reject %q", err, reason)
				}
			}()
			fmt.Fprintf(&log, "%d execute panic\n", step)
		}

		// Counts never moves the state, so it is compared after every step; State and
		// Verdict apply the lazy open → half-open move, so they are compared only sometimes,
		// to leave that move to the call path as often as not.
		if got, want := b.Counts(), m.counts(now()); got != want {
			fail("step %d: Counts = %+v, model %+v", step, got, want)
		}
		if r.IntN(3) == 0 {
			if got, want := b.State(), m.verdict(now()).State; got != want {
				fail("step %d: State = %v, model %v", step, got, want)
			}
			if got, want := b.Verdict(), m.verdict(now()); got.State != want.State || !got.Since.Equal(want.Since) ||
				got.ConsecutiveOpens != want.ConsecutiveOpens || got.OpenTimeout != want.OpenTimeout {
				fail("step %d: Verdict = %+v, model %+v", step, got, want)
			}
			if withCandidate {
				got, ok := b.Candidate()
				want := cand.m.verdict(now())
				cand.drain()
				if !ok || got.State != want.State || !got.Since.Equal(want.Since) || got.Opens != cand.opens || got.WouldRefuse != cand.wouldRefuse {
					fail("step %d: Candidate = %+v, %v; model %+v, %d opens, %d would refuse", step, got, ok, want, cand.opens, cand.wouldRefuse)
				}
			}
		}
		if cand.m != nil {
			for _, tr := range cand.m.transitions {
				if tr.From != Closed && tr.To == Closed {
					reached.candidateCloses++
				}
			}
			before := cand.opens
			cand.drain()
			reached.candidateOpens += int(cand.opens - before)
		}
		got := rec.takeTransitions()
		want := m.transitions
		m.transitions = nil
		for _, w := range want {
			switch {
			case w.From == HalfOpen && w.To == Open && w.Reason == breakerconfig.ReasonTimedOut:
				reached.leakReopens++
			case w.Trigger == breakerconfig.TriggerSlowCallRate:
				reached.slowTrips++
			case w.Trigger == breakerconfig.TriggerSlowProbe:
				reached.slowProbes++
			}
			if w.To == Open && w.Reason == breakerconfig.ReasonAdopted && w.OpenTimeout != m.p.OpenTimeout {
				reached.adoptedPeriods++
			}
			if w.To == Open && w.OpenTimeout > m.p.OpenTimeout && w.Reason != breakerconfig.ReasonAdopted {
				reached.backedOff++
			}
		}
		if len(got) != len(want) {
			fail("step %d: transitions %v, model %v", step, got, want)
		}
		for i := range got {
			g, w := got[i], want[i]
			if g.From != w.From || g.To != w.To || g.Reason != w.Reason || g.Trigger != w.Trigger || g.Period != w.Period || g.Counts != w.Counts ||
				g.ConsecutiveOpens != w.ConsecutiveOpens || g.OpenTimeout != w.OpenTimeout || !g.At.Equal(w.At) || g.Breaker != "model" {
				fail("step %d: transition %+v, model %+v", step, g, w)
			}
		}
	}
	// Whatever is still in flight finishes; the breaker must stay consistent.
	for _, c := range calls {
		c.done(nil)
		m.finish(c.ref, observe.OutcomeSuccess, now())
		cand.finish(c, observe.OutcomeSuccess, now())
	}
	if withCandidate {
		got, _ := b.Candidate()
		want := cand.m.verdict(now())
		cand.drain()
		if got.State != want.State || got.Opens != cand.opens || got.WouldRefuse != cand.wouldRefuse {
			fail("final Candidate = %+v; model %+v, %d opens, %d would refuse", got, want, cand.opens, cand.wouldRefuse)
		}
		reached.wouldRefuse = int(cand.wouldRefuse)
	}
	if got, want := b.Counts(), m.counts(now()); got != want {
		fail("final Counts = %+v, model %+v", got, want)
	}
	reached.tripRestarts = m.restarts
	return reached
}
