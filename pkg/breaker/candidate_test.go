package breaker

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// tolerant is the enforced policy of these tests: it opens only on half of 20 calls.
func tolerant() Policy {
	p := DefaultPolicy()
	p.FailureRatio, p.MinimumThroughput = 0.5, 20
	return p
}

// tight is a candidate that opens on a blip: one failure in five calls.
func tight() *Policy {
	p := DefaultPolicy()
	p.FailureRatio, p.MinimumThroughput, p.OpenTimeout, p.SuccessThreshold, p.HalfOpenPermittedCalls = 0.2, 5, 10*time.Second, 2, 1
	return &p
}

func candidateOf(t *testing.T, b *Breaker) CandidateStats {
	t.Helper()
	st, ok := b.Candidate()
	if !ok {
		t.Fatal("Candidate: no candidate")
	}
	return st
}

// calls runs n calls through Execute, the last failures of them failing (a failure is
// judged when it comes, on the calls before it), and fails the test if the breaker
// refuses one.
func calls(t *testing.T, b *Breaker, n, failures int) {
	t.Helper()
	for i := range n {
		var want error
		if i >= n-failures {
			want = errBoom
		}
		if err := b.Execute(context.Background(), func(context.Context) error { return want }); !errors.Is(err, want) || (want == nil && err != nil) {
			t.Fatalf("call %d: %v, want %v", i, err, want)
		}
	}
}

// The candidate opens on outcomes the enforced policy tolerates, counts the calls it would
// have refused, never refuses one, half-opens on time and closes on probes that ran.
func TestCandidateJudgesInShadow(t *testing.T) {
	clock := newFakeClock()
	b, err := New("payments", tolerant(), WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Candidate(); ok {
		t.Fatal("a new breaker has a candidate")
	}
	start := clock.Now()
	if err := b.SetCandidate(tight()); err != nil {
		t.Fatal(err)
	}
	if st := candidateOf(t, b); st.State != Closed || st.Opens != 0 || st.WouldRefuse != 0 || !st.Start.Equal(start) || st.Policy.Mode != ModeMetricsOnly {
		t.Fatalf("a fresh candidate: %+v", st)
	}

	// A blip: 1 failure in 5 calls. The enforced policy rides it out; the candidate opens.
	calls(t, b, 5, 1)
	st := candidateOf(t, b)
	if b.State() != Closed || st.State != Open || st.Opens != 1 || !st.Since.Equal(clock.Now()) {
		t.Fatalf("after a blip: enforced %v, candidate %+v", b.State(), st)
	}
	// Open, it would refuse every call; they all run.
	calls(t, b, 7, 0)
	if st := candidateOf(t, b); st.WouldRefuse != 7 {
		t.Errorf("wouldRefuse %d after 7 calls while open, want 7", st.WouldRefuse)
	}
	clock.Advance(4 * time.Second)
	if st := candidateOf(t, b); st.TimeOpen != 4*time.Second || st.Enforced.TimeOpen != 0 || st.Enforced.Opens != 0 || st.Enforced.Refused != 0 {
		t.Errorf("time open %v, enforced %+v", st.TimeOpen, st.Enforced)
	}

	// After its openTimeout the candidate is half-open: one probe at a time, taken from the
	// calls that run; a second call while the probe is out is one it would have refused.
	clock.Advance(6 * time.Second)
	if st := candidateOf(t, b); st.State != HalfOpen {
		t.Fatalf("after openTimeout the candidate is %v", st.State)
	}
	before := candidateOf(t, b).WouldRefuse
	probe, err := b.Allow()
	if err != nil {
		t.Fatal(err)
	}
	other, err := b.Allow()
	if err != nil {
		t.Fatalf("the candidate's full probe slots refused a call: %v", err)
	}
	if st := candidateOf(t, b); st.WouldRefuse != before+1 {
		t.Errorf("wouldRefuse %d with the probe slot full, want %d", st.WouldRefuse, before+1)
	}
	other(nil) // not a probe: it changes nothing
	probe(nil)
	if st := candidateOf(t, b); st.State != HalfOpen {
		t.Fatalf("one probe success of two: %v", st.State)
	}
	calls(t, b, 1, 0)
	st = candidateOf(t, b)
	if st.State != Closed || st.Opens != 1 || st.TimeOpen != 10*time.Second {
		t.Errorf("after two probe successes: %+v", st)
	}
	if b.State() != Closed || b.Counts().Calls != 5+7+3 {
		t.Errorf("the enforced breaker: %v, %+v", b.State(), b.Counts())
	}
}

// A failed probe re-opens the candidate, as it would the enforced circuit; the call path
// Call takes feeds it too.
func TestCandidateReopensOnAFailedProbe(t *testing.T) {
	clock := newFakeClock()
	b, _ := New("payments", tolerant(), WithClock(clock))
	if err := b.SetCandidate(tight()); err != nil {
		t.Fatal(err)
	}
	calls(t, b, 5, 1)
	clock.Advance(10 * time.Second)
	_, err := Call(context.Background(), b, Callbacks[int]{Closed: func(context.Context) (int, error) { return 0, errBoom }})
	if !errors.Is(err, errBoom) {
		t.Fatal(err)
	}
	if st := candidateOf(t, b); st.State != Open || st.Opens != 2 {
		t.Errorf("after a failed probe: %+v", st)
	}
}

// The enforced side over the candidate's span: its opens, its refusals (not seen by the
// candidate, which judges only calls that ran) and its time open.
func TestCandidateComparesWithTheEnforcedPolicy(t *testing.T) {
	clock := newFakeClock()
	b, _ := New("payments", tolerant(), WithClock(clock))
	b.Trip() // open before the candidate: its time open counts from the candidate's start
	clock.Advance(time.Second)
	if err := b.SetCandidate(tight()); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := b.Execute(context.Background(), succeed); !errors.Is(err, ErrOpen) {
			t.Fatalf("an open circuit ran a call: %v", err)
		}
	}
	clock.Advance(2 * time.Second)
	st := candidateOf(t, b)
	if st.Enforced.Refused != 3 || st.Enforced.Opens != 0 || st.Enforced.TimeOpen != 2*time.Second || st.WouldRefuse != 0 || st.State != Closed {
		t.Errorf("enforced open: %+v", st)
	}
	clock.Advance(30 * time.Second)
	calls(t, b, 2, 0) // two probe successes close it
	clock.Advance(time.Second)
	b.Trip()
	clock.Advance(time.Second)
	st = candidateOf(t, b)
	if b.State() != Open || st.Enforced.Opens != 1 || st.Enforced.TimeOpen != 32*time.Second+time.Second {
		t.Errorf("re-opened: %+v", st.Enforced)
	}
}

// Removing the candidate stops it; setting one again starts from zero; an equal policy
// changes nothing; an invalid one is refused naming the field, and the old one stays.
func TestSetCandidate(t *testing.T) {
	clock := newFakeClock()
	b, _ := New("payments", tolerant(), WithClock(clock))
	if err := b.SetCandidate(tight()); err != nil {
		t.Fatal(err)
	}
	calls(t, b, 5, 1)
	again := tight()
	again.Mode, again.Throttle = ModeForcedOpen, &Throttle{K: 2} // ignored: the candidate only judges
	if err := b.SetCandidate(again); err != nil {
		t.Fatal(err)
	}
	if st := candidateOf(t, b); st.Opens != 1 || st.State != Open {
		t.Errorf("an equal policy reset the candidate: %+v", st)
	}
	bad := tight()
	bad.FailureRatio = 1.5
	err := b.SetCandidate(bad)
	var fe *fieldError
	if !errors.As(err, &fe) || fe.Field != "failureRatio" {
		t.Errorf("an invalid candidate: %v, want a fieldError naming failureRatio", err)
	}
	if st := candidateOf(t, b); st.Opens != 1 || st.Policy.FailureRatio != 0.2 {
		t.Errorf("the old candidate did not stay: %+v", st)
	}

	if err := b.SetCandidate(nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Candidate(); ok {
		t.Fatal("removed, the candidate is still there")
	}
	calls(t, b, 5, 1)
	if err := b.SetCandidate(nil); err != nil {
		t.Fatal(err)
	}

	if b.State() != Closed || b.Counts().Calls != 10 {
		t.Errorf("the enforced breaker: %v %+v", b.State(), b.Counts())
	}
	looser := tight()
	looser.FailureRatio = 0.9
	clock.Advance(time.Minute)
	if err := b.SetCandidate(looser); err != nil {
		t.Fatal(err)
	}
	if st := candidateOf(t, b); st.Opens != 0 || st.WouldRefuse != 0 || st.State != Closed || !st.Start.Equal(clock.Now()) {
		t.Errorf("a new candidate starts afresh: %+v", st)
	}
}

// A candidate judges slow calls by its own SlowCallDuration, the enforced one setting none;
// a panic is a failure for both.
func TestCandidateTimesCallsOfItsOwn(t *testing.T) {
	clock := newFakeClock()
	b, _ := New("payments", tolerant(), WithClock(clock))
	c := tight()
	c.FailureRatio, c.SlowCallDuration, c.SlowCallRatio = 1, time.Second, 0.6
	if err := b.SetCandidate(c); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if err := b.Execute(context.Background(), func(context.Context) error { clock.Advance(2 * time.Second); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if st := candidateOf(t, b); st.State != Open || b.Counts().Slow != 0 {
		t.Errorf("five slow calls: candidate %v, enforced counts %+v", st.State, b.Counts())
	}

	b2, _ := New("payments", tolerant(), WithClock(clock))
	c = tight()
	c.MinimumThroughput, c.FailureRatio = 1, 1
	if err := b2.SetCandidate(c); err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() { _ = recover() }()
		_ = b2.Execute(context.Background(), func(context.Context) error { panic("boom") })
	}()
	if st := candidateOf(t, b2); st.State != Open || b2.Counts().Failures != 1 {
		t.Errorf("a panic: candidate %+v, enforced %+v", st, b2.Counts())
	}
}

// TestCandidateStress: goroutines calling through every path while the candidate is
// replaced, removed and read. The enforced policy never refuses (ForcedClosed), so any
// refusal is the candidate's doing; run with -race.
func TestCandidateStress(t *testing.T) {
	p := tolerant()
	p.Mode = ModeForcedClosed
	b, err := New("stress", p)
	if err != nil {
		t.Fatal(err)
	}
	var refused, ran atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				var fail error
				if (i+g)%3 == 0 {
					fail = errBoom
				}
				var err error
				switch i % 3 {
				case 0:
					err = b.Execute(context.Background(), func(context.Context) error { return fail })
				case 1:
					var done func(error)
					if done, err = b.Allow(); err == nil {
						done(fail)
					}
				default:
					_, err = Call(context.Background(), b, Callbacks[int]{Closed: func(context.Context) (int, error) { return 0, fail }})
				}
				if errors.Is(err, ErrOpen) {
					refused.Add(1)
				}
				ran.Add(1)
			}
		})
	}
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			switch c := tight(); i % 4 {
			case 0:
				_ = b.SetCandidate(nil)
			case 1:
				c.OpenTimeout = time.Second
				_ = b.SetCandidate(c)
			default:
				_ = b.SetCandidate(c)
			}
			if st, ok := b.Candidate(); ok && (st.WouldRefuse < 0 || st.Opens < 0) {
				t.Errorf("candidate %+v", st)
			}
			time.Sleep(time.Millisecond)
		}
	})
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
	if refused.Load() != 0 {
		t.Errorf("%d of %d calls refused with a candidate and a ForcedClosed policy", refused.Load(), ran.Load())
	}
	// A last candidate, judged alone (the one left may equal it: removed first, so it
	// starts afresh): every call it sees it counts once.
	_ = b.SetCandidate(nil)
	if err := b.SetCandidate(tight()); err != nil {
		t.Fatal(err)
	}
	for range 100 {
		_ = b.Execute(context.Background(), func(context.Context) error { return errBoom })
	}
	if st := candidateOf(t, b); st.State != Open || st.Opens != 1 || st.WouldRefuse != 95 {
		t.Errorf("after 100 failures: %+v, want open once, refusing the 95 after the 5th", st)
	}
}
