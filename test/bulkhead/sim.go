package bulkhead

import (
	"math"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
)

// Sim is a fleet of pods calling one dependency in closed loop, on a fake clock driven by
// an event loop: nothing sleeps, and a run is a function of its inputs alone. Each pod is a
// real breaker.Breaker; the operator's part (shares, the fleet's baseline) is played by
// the scenario through events that call Update and SetFleet, as the pod's agent would.
type Sim struct {
	Clock  *Clock
	Server Server
	Pods   []*Pod

	now    time.Duration // since the start
	events events
	seq    uint64
	// The fleet's calls in flight as time held them, by whole second of the run.
	seconds []Second
	heldAt  time.Duration
}

// Server is the dependency: Capacity calls in flight at Base latency; past it a call
// takes Base × (in flight / Capacity)^Exponent, the in-flight count taken as it starts.
type Server struct {
	Capacity float64
	Base     time.Duration
	Exponent float64
	InFlight int
}

// Latency is how long a call started now, with n calls in flight counting it, takes.
func (s *Server) Latency(n int) time.Duration {
	x := max(1, float64(n)/s.Capacity)
	return time.Duration(float64(s.Base) * math.Pow(x, s.Exponent))
}

// Pod is one pod: a breaker and Demand callers in closed loop, each calling again as soon
// as its call ends and trying again, when refused, as soon as one of the pod's calls ends.
type Pod struct {
	B       *breaker.Breaker
	Demand  int
	Running bool

	inFlight int
	Refused  int64
}

// Second is what the fleet's calls in flight were during one second of the run: the
// lowest and highest count held for any time, and the time-weighted mean.
type Second struct {
	Min, Max int
	Mean     float64
}

// Clock is the simulation's breaker.Clock: the event loop's time, read without a lock,
// since every breaker of a run is called from the loop's goroutine alone (a
// breakertest.Clock's lock costs a tenth of a run).
type Clock struct {
	start time.Time
	now   time.Duration
}

var _ interface {
	breaker.Clock
	Monotonic() time.Duration
} = (*Clock)(nil)

// Now is the wall clock's time.
func (c *Clock) Now() time.Time { return c.start.Add(c.now) }

// Monotonic is the time since the start, which a breaker measures its durations on.
func (c *Clock) Monotonic() time.Duration { return c.now }

// New returns a simulation starting at start.
func New(start time.Time, server Server) *Sim {
	return &Sim{Clock: &Clock{start: start}, Server: server}
}

// Now is the time since the start of the run.
func (s *Sim) Now() time.Duration { return s.now }

// At schedules f at t since the start (not before now).
func (s *Sim) At(t time.Duration, f func()) {
	s.seq++
	s.events.push(event{at: max(t, s.now), seq: s.seq, f: f})
}

// Every schedules f every d from first until the run ends.
func (s *Sim) Every(first, d time.Duration, f func()) {
	var tick func()
	tick = func() {
		f()
		s.At(s.now+d, tick)
	}
	s.At(first, tick)
}

// Start makes p call from now on.
func (s *Sim) Start(p *Pod) {
	p.Running = true
	s.Fill(p)
}

// Fill starts as many calls of p as its breaker admits, up to its demand: after one of its
// calls ends, and after its limit rose.
func (s *Sim) Fill(p *Pod) {
	for p.Running && p.inFlight < p.Demand {
		done, err := p.B.Allow()
		if err != nil {
			p.Refused++
			return
		}
		s.hold()
		p.inFlight++
		s.Server.InFlight++
		s.At(s.now+s.Server.Latency(s.Server.InFlight), func() {
			s.hold()
			done(nil)
			p.inFlight--
			s.Server.InFlight--
			s.Fill(p)
		})
	}
}

// Run processes events until the run has lasted d.
func (s *Sim) Run(d time.Duration) {
	for len(s.events) > 0 && s.events[0].at <= d {
		e := s.events.pop()
		if e.at > s.now {
			s.hold()
			s.now, s.Clock.now = e.at, e.at
		}
		e.f()
	}
	s.hold()
	s.now, s.Clock.now = d, d
	s.hold()
}

// hold records the fleet's calls in flight as held from the last record until now; it is
// called before every change of the count, so that the counts an instant passes through
// (a call ends and the next starts at the same time) are not taken for held ones.
func (s *Sim) hold() {
	n := s.Server.InFlight
	for from := s.heldAt; from < s.now; {
		sec := int(from / time.Second)
		for len(s.seconds) <= sec {
			s.seconds = append(s.seconds, Second{Min: math.MaxInt})
		}
		to := min(s.now, time.Duration(sec+1)*time.Second)
		r := &s.seconds[sec]
		r.Min, r.Max = min(r.Min, n), max(r.Max, n)
		r.Mean += float64(n) * (to - from).Seconds()
		from = to
	}
	s.heldAt = s.now
}

// Seconds returns the fleet's calls in flight second by second over [from, to).
func (s *Sim) Seconds(from, to time.Duration) []Second {
	a, b := int(from/time.Second), min(int(to/time.Second), len(s.seconds))
	if a >= b {
		return nil
	}
	return s.seconds[a:b]
}

// Span is the lowest, the highest and the mean of the fleet's calls in flight over seconds.
func Span(seconds []Second) (lo, hi int, mean float64) {
	lo = math.MaxInt
	for _, r := range seconds {
		lo, hi, mean = min(lo, r.Min), max(hi, r.Max), mean+r.Mean
	}
	return lo, hi, mean / float64(max(len(seconds), 1))
}

type event struct {
	at  time.Duration
	seq uint64 // events at one instant run in the order they were scheduled
	f   func()
}

// events is a binary min-heap by (at, seq), typed so that scheduling boxes nothing.
type events []event

func (e event) before(o event) bool { return e.at < o.at || e.at == o.at && e.seq < o.seq }

func (h *events) push(e event) {
	*h = append(*h, e)
	q := *h
	for i := len(q) - 1; i > 0; {
		p := (i - 1) / 2
		if !q[i].before(q[p]) {
			break
		}
		q[i], q[p] = q[p], q[i]
		i = p
	}
}

func (h *events) pop() event {
	q := *h
	top := q[0]
	n := len(q) - 1
	q[0] = q[n]
	q[n] = event{}
	q = q[:n]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < n && q[l].before(q[m]) {
			m = l
		}
		if r := l + 1; r < n && q[r].before(q[m]) {
			m = r
		}
		if m == i {
			break
		}
		q[i], q[m] = q[m], q[i]
		i = m
	}
	*h = q
	return top
}
