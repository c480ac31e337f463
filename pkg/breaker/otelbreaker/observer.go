package otelbreaker

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/observe"
	"github.com/fusebox-dev/fusebox/pkg/breaker/registry"
)

// ScopeName is the instrumentation scope of the meter the observer creates.
const ScopeName = "github.com/fusebox-dev/fusebox/pkg/breaker/otelbreaker"

// Attribute keys, utopia-php/circuit-breaker's.
const (
	KeyName          = attribute.Key("circuit_breaker.name")
	KeyOutcome       = attribute.Key("circuit_breaker.outcome")
	KeyInitialState  = attribute.Key("circuit_breaker.initial_state")
	KeyState         = attribute.Key("circuit_breaker.state")
	KeyReason        = attribute.Key("circuit_breaker.reason")
	KeyFromState     = attribute.Key("circuit_breaker.from_state")
	KeyToState       = attribute.Key("circuit_breaker.to_state")
	KeyCause         = attribute.Key("circuit_breaker.cause")
	KeyEvent         = attribute.Key("circuit_breaker.event")
	KeyExceptionType = attribute.Key("exception.type")
	KeyTrigger       = attribute.Key("circuit_breaker.trigger")
)

// Option configures an [Observer].
type Option func(*config)

type config struct {
	prefix string
}

// WithPrefix namespaces every metric name: "backend" gives "backend.breaker.calls". Dots
// around the prefix are ignored.
func WithPrefix(prefix string) Option {
	return func(c *config) { c.prefix = strings.Trim(prefix, ".") }
}

// Observer records utopia-php/circuit-breaker's instruments for every breaker it is given to with
// [breaker.WithObserver]. It is a [observe.CallObserver], and a call costs it a few atomic
// additions: the per-call counters (calls, callback failures, fallbacks) are kept in the
// observer's own atomic cells and reported as observable counters when metrics are
// collected, as the gauges are, because the SDK's synchronous Add normalizes its attribute
// set on every measurement, which alone costs more than the whole budget of a call.
// Transitions, rare, are recorded synchronously.
//
// Inspecting a breaker ([breaker.Breaker.State], [breaker.Breaker.Counts]) records nothing.
// An Observer is safe for concurrent use.
type Observer struct {
	calls, callbackFailures, fallbacks metric.Int64ObservableCounter
	slowCalls                          metric.Int64ObservableCounter
	retries, throttled, limited        metric.Int64ObservableCounter
	transitions                        metric.Int64Counter
	eventTimestamp                     metric.Float64Gauge
	state, active, failures, successes metric.Int64ObservableGauge
	limit                              metric.Int64ObservableGauge
	registration                       metric.Registration

	series atomic.Pointer[map[string]*series] // copied on write, under mu
	// recent maps the names breakers pass to the series, by the address of the name's
	// bytes: a breaker passes the same string on every call, so this skips hashing it.
	recent [64]atomic.Pointer[recentEntry]
	mu     sync.Mutex
	// tracked breakers and registries, read at collection for the failures and successes
	// gauges; guarded by mu.
	tracked    []*breaker.Breaker
	registries []*registry.Registry
}

var _ observe.CallObserver = (*Observer)(nil)

var bg = context.Background()

// New creates the instruments on a meter of mp (the global MeterProvider when mp is nil).
func New(mp metric.MeterProvider, opts ...Option) (*Observer, error) {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	name := func(n string) string {
		if cfg.prefix == "" {
			return n
		}
		return cfg.prefix + "." + n
	}
	m := mp.Meter(ScopeName)
	o := &Observer{}
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	var err error

	o.calls, err = m.Int64ObservableCounter(name("breaker.calls"), metric.WithUnit("{call}"),
		metric.WithDescription("Calls judged by the breaker, by outcome and by the state before and after."))
	add(err)
	o.callbackFailures, err = m.Int64ObservableCounter(name("breaker.callback_failures"), metric.WithUnit("{failure}"),
		metric.WithDescription("Protected calls that returned an error or panicked, by the error's Go type."))
	add(err)
	o.fallbacks, err = m.Int64ObservableCounter(name("breaker.fallbacks"), metric.WithUnit("{fallback}"),
		metric.WithDescription("Fallbacks run by breaker.Call, by reason."))
	add(err)
	o.slowCalls, err = m.Int64ObservableCounter(name("breaker.slow_calls"), metric.WithUnit("{call}"),
		metric.WithDescription("Calls that took at least the policy's slowCallDuration, by the state they ran in (only judged when it is set)."))
	add(err)
	o.retries, err = m.Int64ObservableCounter(name("breaker.retries"), metric.WithUnit("{retry}"),
		metric.WithDescription("Retries asked of the breaker's retry budget, by outcome: allowed or refused."))
	add(err)
	o.throttled, err = m.Int64ObservableCounter(name("breaker.throttled"), metric.WithUnit("{call}"),
		metric.WithDescription("Calls adaptive throttling rejected while the circuit was closed."))
	add(err)
	o.limited, err = m.Int64ObservableCounter(name("breaker.concurrency_limited"), metric.WithUnit("{call}"),
		metric.WithDescription("Calls the concurrency limit (the pod's share of spec.concurrency.maxInFlight) refused, which never ran."))
	add(err)
	o.transitions, err = m.Int64Counter(name("breaker.transitions"), metric.WithUnit("{transition}"),
		metric.WithDescription("State transitions, by from and to state, by cause, and for an open on calls by trigger (failure_rate, slow_call_rate, failed_probe, slow_probe)."))
	add(err)
	o.eventTimestamp, err = m.Float64Gauge(name("breaker.event.timestamp"), metric.WithUnit("s"),
		metric.WithDescription("Unix time of the last transition or half-open probe."))
	add(err)
	o.state, err = m.Int64ObservableGauge(name("breaker.state"),
		metric.WithDescription("State of the circuit: 0 closed, 1 open, 2 half-open."))
	add(err)
	o.active, err = m.Int64ObservableGauge(name("breaker.active_calls"), metric.WithUnit("{call}"),
		metric.WithDescription("Calls admitted and not yet finished, by the state they were admitted in (after any open → half-open move): closed, or half_open for probes, or open for calls ModeMetricsOnly lets through."))
	add(err)
	o.failures, err = m.Int64ObservableGauge(name("breaker.failures"), metric.WithUnit("{failure}"),
		metric.WithDescription("Failures the circuit is judging on (Counts().Failures) of tracked breakers."))
	add(err)
	o.successes, err = m.Int64ObservableGauge(name("breaker.successes"), metric.WithUnit("{success}"),
		metric.WithDescription("Consecutive half-open successes (Counts().Successes) of tracked breakers."))
	add(err)
	o.limit, err = m.Int64ObservableGauge(name("breaker.concurrency_limit"), metric.WithUnit("{call}"),
		metric.WithDescription("The limit on calls in flight in force (Traffic().Limit: the pod's share, or the adaptive limit under it) of tracked breakers that have one."))
	add(err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	o.registration, err = m.RegisterCallback(o.observe,
		o.calls, o.callbackFailures, o.fallbacks, o.slowCalls, o.retries, o.throttled, o.limited, o.state, o.active, o.failures, o.successes, o.limit)
	if err != nil {
		return nil, err
	}
	empty := map[string]*series{}
	o.series.Store(&empty)
	return o, nil
}

// Track makes the failures, successes and concurrency_limit gauges report b, reading
// [breaker.Breaker.Counts] and [breaker.Breaker.Traffic] at collection. The other instruments need no tracking: they cover every breaker the
// observer is given to.
func (o *Observer) Track(b *breaker.Breaker) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.tracked = append(o.tracked, b)
}

// TrackRegistry tracks every breaker r holds at collection time, as [Observer.Track] does.
func (o *Observer) TrackRegistry(r *registry.Registry) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.registries = append(o.registries, r)
}

// Close stops the gauges' collection callback.
func (o *Observer) Close() error { return o.registration.Unregister() }

type recentEntry struct {
	data *byte
	len  int
	s    *series
}

// get returns the series of a breaker, creating it on first sight.
func (o *Observer) get(name string) *series {
	data := unsafe.StringData(name)
	slot := &o.recent[(uintptr(unsafe.Pointer(data))>>4)%uintptr(len(o.recent))]
	if e := slot.Load(); e != nil && e.data == data && e.len == len(name) {
		return e.s // the same bytes: the same name
	}
	// A Group's members ("<group>/<key>") share the Group's series: one per key would
	// grow without bound with the keys, which a Group evicts and creates at will.
	label, member := name, false
	if g, _, ok := registry.SplitKeyName(name); ok {
		label, member = g, true
	}
	if s, ok := (*o.series.Load())[label]; ok {
		slot.Store(&recentEntry{data: data, len: len(name), s: s})
		return s
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	old := *o.series.Load()
	if s, ok := old[label]; ok {
		return s
	}
	s := newSeries(label)
	s.group = member
	m := make(map[string]*series, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[label] = s
	o.series.Store(&m)
	return s
}

// inRange guards the attribute tables against values a newer breaker package might add.
func inRange[T ~uint8 | ~int32](v T, n int) bool { return v >= 0 && int(v) < n }

// OnTransition implements [observe.Observer].
func (o *Observer) OnTransition(t observe.Transition) {
	if !inRange(t.From, 3) || !inRange(t.To, 3) {
		return
	}
	s := o.get(t.Breaker)
	packed := t.Period<<2 | uint64(t.To)
	for {
		cur := s.stateAt.Load()
		if cur>>2 > t.Period || s.stateAt.CompareAndSwap(cur, packed) {
			break
		}
	}
	cause, known := causeOf(t.Reason)
	switch trigger := triggerOf(t.Trigger); {
	case known && trigger != "":
		// Rare (a circuit opening on its calls), so its attribute set is built here.
		o.transitions.Add(bg, 1, addOpt(s.name, KeyFromState.String(t.From.String()), KeyToState.String(t.To.String()),
			KeyCause.String(causes[cause]), KeyTrigger.String(trigger))...)
	case known:
		o.transitions.Add(bg, 1, s.transitions[t.From][t.To][cause]...)
	}
	at := t.At
	if at.IsZero() {
		at = time.Now()
	}
	o.eventTimestamp.Record(bg, unixSeconds(at), s.transEvent[t.From][t.To]...)
}

// noteState records the state a call saw, for breakers no transition has been seen of yet
// (a breaker created forced open starts open without one).
func (s *series) noteState(st breaker.State) {
	if cur := s.stateAt.Load(); cur>>2 == 0 && breaker.State(cur&3) != st {
		s.stateAt.CompareAndSwap(cur, uint64(st))
	}
}

// OnCallStart implements [observe.CallObserver].
func (o *Observer) OnCallStart(name string, st breaker.State) {
	if !inRange(st, 3) {
		return
	}
	s := o.get(name)
	s.started[st].Add(1)
	s.noteState(st)
}

// OnCallEnd implements [observe.CallObserver].
func (o *Observer) OnCallEnd(ev observe.CallEvent) {
	if !inRange(ev.Outcome, 4) || !inRange(ev.Initial, 3) || !inRange(ev.Final, 3) {
		return
	}
	s := o.get(ev.Breaker)
	s.noteState(ev.Final)
	s.calls[ev.Outcome][ev.Initial][ev.Final].n.Add(1)
	if ev.Slow {
		s.slow[ev.Initial].n.Add(1)
	}
	if ev.Outcome == observe.OutcomeRejected {
		switch {
		case errors.Is(ev.Err, breaker.ErrThrottled):
			s.throttled.n.Add(1)
		case errors.Is(ev.Err, breaker.ErrConcurrencyLimited):
			s.limited.n.Add(1)
		}
	}
	if ev.Outcome != observe.OutcomeRejected && (ev.Err != nil || ev.Panic != nil) {
		s.failureCell(ev.Err, ev.Panic, ev.Initial).n.Add(1)
	}
	if ev.Initial == breaker.HalfOpen && ev.Outcome != observe.OutcomeRejected {
		o.eventTimestamp.Record(bg, unixSeconds(time.Now()), s.probeEvent[ev.Outcome]...)
	}
}

// failureCell returns the counter of a kind of callback failure: the Go type of the error,
// as utopia-php/circuit-breaker records the exception's class ("panic T" for a panic with a value of type
// T), and the state the call ran in.
func (s *series) failureCell(err error, panicValue any, st breaker.State) *cell {
	panicked := panicValue != nil
	k := failKey{t: reflect.TypeOf(err), state: st, panicked: panicked}
	if panicked {
		k.t = reflect.TypeOf(panicValue)
	}
	if c, ok := s.failures.Load(k); ok {
		return c.(*cell)
	}
	typ := "<nil>"
	if k.t != nil {
		typ = k.t.String()
	}
	if panicked {
		typ = "panic " + typ
	}
	c := &cell{opt: observeOpt(s.name, KeyExceptionType.String(typ), KeyState.String(st.String()))}
	v, _ := s.failures.LoadOrStore(k, c)
	return v.(*cell)
}

// OnFallback implements [observe.CallObserver].
func (o *Observer) OnFallback(ev observe.CallEvent) {
	o.get(ev.Breaker).fallbacks[fallbackOf(ev)].n.Add(1)
}

// OnRetry implements [observe.CallObserver].
func (o *Observer) OnRetry(name string, allowed bool) {
	i := 0
	if allowed {
		i = 1
	}
	o.get(name).retries[i].n.Add(1)
}

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// observe is the collection callback of the gauges.
func (o *Observer) observe(_ context.Context, obs metric.Observer) error {
	for _, s := range *o.series.Load() {
		if !s.group {
			obs.ObserveInt64(o.state, int64(s.stateAt.Load()&3), s.base)
		}
		for i := range states {
			// Closed is always reported, so that a breaker has an active_calls series
			// from its first sight; the others from their first admitted call on.
			if i == int(breaker.Closed) || s.started[i].Load() != 0 {
				obs.ObserveInt64(o.active, s.inFlight(i), s.active[i])
			}
		}
		for i := range s.calls {
			for j := range s.calls[i] {
				for k := range s.calls[i][j] {
					s.calls[i][j][k].observe(obs, o.calls)
				}
			}
		}
		for i := range s.fallbacks {
			s.fallbacks[i].observe(obs, o.fallbacks)
		}
		for i := range s.slow {
			s.slow[i].observe(obs, o.slowCalls)
		}
		for i := range s.retries {
			s.retries[i].observe(obs, o.retries)
		}
		s.throttled.observe(obs, o.throttled)
		s.limited.observe(obs, o.limited)
		s.failures.Range(func(_, c any) bool {
			c.(*cell).observe(obs, o.callbackFailures)
			return true
		})
	}
	o.mu.Lock()
	tracked := append([]*breaker.Breaker(nil), o.tracked...)
	regs := append([]*registry.Registry(nil), o.registries...)
	o.mu.Unlock()
	seen := make(map[*breaker.Breaker]bool, len(tracked))
	report := func(b *breaker.Breaker) {
		if seen[b] {
			return
		}
		seen[b] = true
		c := b.Counts()
		s := o.get(b.Name())
		obs.ObserveInt64(o.failures, c.Failures, s.base)
		obs.ObserveInt64(o.successes, c.Successes, s.base)
		if tr := b.Traffic(); tr.Limit > 0 {
			obs.ObserveInt64(o.limit, int64(tr.Limit), s.base)
		}
	}
	for _, b := range tracked {
		report(b)
	}
	for _, r := range regs {
		r.Each(report)
	}
	return nil
}
