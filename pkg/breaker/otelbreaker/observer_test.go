package otelbreaker_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakertest"
	"github.com/fusebox-dev/fusebox/pkg/breaker/otelbreaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/registry"
)

var errBoom = errors.New("boom")

// harness is a breaker observed through an SDK meter provider read by hand.
type harness struct {
	t      *testing.T
	reader *sdkmetric.ManualReader
	obs    *otelbreaker.Observer
	b      *breaker.Breaker
	clock  *breakertest.Clock
}

func newHarness(t *testing.T, opts ...otelbreaker.Option) *harness {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	obs, err := otelbreaker.New(mp, opts...)
	if err != nil {
		t.Fatal(err)
	}
	clock := breakertest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	p := breaker.DefaultPolicy()
	p.MinimumThroughput = 3
	p.SuccessThreshold = 1
	p.OpenTimeout = time.Minute
	b, err := breaker.New("payments", p, breaker.WithObserver(obs), breaker.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	obs.Track(b)
	return &harness{t: t, reader: reader, obs: obs, b: b, clock: clock}
}

// point is one data point, flattened: metric name, attributes as "k=v" sorted, value.
type point struct {
	name  string
	attrs string
	value float64
}

func (h *harness) collect() map[string][]point {
	h.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := h.reader.Collect(context.Background(), &rm); err != nil {
		h.t.Fatal(err)
	}
	out := map[string][]point{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != otelbreaker.ScopeName {
			h.t.Errorf("scope %q", sm.Scope.Name)
		}
		for _, m := range sm.Metrics {
			var pts []point
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					pts = append(pts, point{m.Name, attrString(dp.Attributes), float64(dp.Value)})
				}
			case metricdata.Gauge[int64]:
				for _, dp := range d.DataPoints {
					pts = append(pts, point{m.Name, attrString(dp.Attributes), float64(dp.Value)})
				}
			case metricdata.Gauge[float64]:
				for _, dp := range d.DataPoints {
					pts = append(pts, point{m.Name, attrString(dp.Attributes), dp.Value})
				}
			default:
				h.t.Errorf("%s: unexpected data %T", m.Name, m.Data)
			}
			slices.SortFunc(pts, func(a, b point) int { return strings.Compare(a.attrs, b.attrs) })
			out[m.Name] = pts
		}
	}
	return out
}

func attrString(s attribute.Set) string {
	var kv []string
	for _, a := range s.ToSlice() {
		kv = append(kv, string(a.Key)+"="+a.Value.String())
	}
	slices.Sort(kv)
	return strings.Join(kv, ",")
}

// value returns the value of the point of name whose attributes include every one of want,
// failing the test unless exactly one matches.
func value(t *testing.T, got map[string][]point, name string, want ...string) float64 {
	t.Helper()
	var found []point
	for _, p := range got[name] {
		ok := true
		for _, w := range want {
			ok = ok && slices.Contains(strings.Split(p.attrs, ","), w)
		}
		if ok {
			found = append(found, p)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s{%s}: %d points match, want 1; have %v", name, strings.Join(want, ","), len(found), got[name])
	}
	return found[0].value
}

const name = "circuit_breaker.name=payments"

func fail(context.Context) error    { return errBoom }
func succeed(context.Context) error { return nil }

func TestInstruments(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	fallback := func(context.Context, error) (int, error) { return -1, nil }

	_ = h.b.Execute(ctx, succeed)
	_ = h.b.Execute(ctx, func(context.Context) error { return fmt.Errorf("wrapped: %w", fs.ErrNotExist) })
	_ = h.b.Execute(ctx, fail) // 2 failures in 3 calls: opens
	if h.b.State() != breaker.Open {
		t.Fatalf("state %v", h.b.State())
	}
	got := h.collect()
	for _, c := range []struct {
		want  []string
		value float64
	}{
		{[]string{"circuit_breaker.outcome=success", "circuit_breaker.initial_state=closed", "circuit_breaker.state=closed"}, 1},
		{[]string{"circuit_breaker.outcome=failure", "circuit_breaker.initial_state=closed", "circuit_breaker.state=closed"}, 1},
		{[]string{"circuit_breaker.outcome=failure", "circuit_breaker.initial_state=closed", "circuit_breaker.state=open"}, 1},
	} {
		if v := value(t, got, "breaker.calls", append(c.want, name)...); v != c.value {
			t.Errorf("calls %v = %v, want %v", c.want, v, c.value)
		}
	}
	if v := value(t, got, "breaker.callback_failures", name, "exception.type=*fmt.wrapError", "circuit_breaker.state=closed"); v != 1 {
		t.Errorf("callback failures (*fmt.wrapError) = %v", v)
	}
	if v := value(t, got, "breaker.callback_failures", name, "exception.type=*errors.errorString"); v != 1 {
		t.Errorf("callback failures (*errors.errorString) = %v", v)
	}
	if v := value(t, got, "breaker.transitions", name, "circuit_breaker.from_state=closed", "circuit_breaker.to_state=open", "circuit_breaker.cause=calls", "circuit_breaker.trigger=failure_rate"); v != 1 {
		t.Errorf("transitions = %v", v)
	}
	if v := value(t, got, "breaker.event.timestamp", name, "circuit_breaker.event=transition", "circuit_breaker.to_state=open"); v != float64(h.clock.Now().Unix()) {
		t.Errorf("event timestamp %v, want the transition's time %v", v, h.clock.Now().Unix())
	}
	if v := value(t, got, "breaker.state", name); v != 1 {
		t.Errorf("state gauge %v, want 1 (open)", v)
	}
	if v := value(t, got, "breaker.failures", name); v != 2 {
		t.Errorf("failures gauge %v, want 2 (the tally that opened it)", v)
	}
	if v := value(t, got, "breaker.successes", name); v != 0 {
		t.Errorf("successes gauge %v", v)
	}
	if v := value(t, got, "breaker.active_calls", name, "circuit_breaker.state=closed"); v != 0 {
		t.Errorf("active calls %v", v)
	}

	// Open: short-circuited, with the fallback.
	if r, _ := breaker.Call(ctx, h.b, breaker.Callbacks[int]{Closed: func(context.Context) (int, error) { return 1, nil }, Open: fallback}); r != -1 {
		t.Fatal("fallback not run")
	}
	got = h.collect()
	if v := value(t, got, "breaker.calls", name, "circuit_breaker.outcome=rejected", "circuit_breaker.initial_state=open"); v != 1 {
		t.Errorf("rejected calls %v", v)
	}
	if v := value(t, got, "breaker.fallbacks", name, "circuit_breaker.reason=open"); v != 1 {
		t.Errorf("fallbacks (open) %v", v)
	}

	// Half-open: one probe runs (and is watched while in flight), a second is refused.
	h.clock.Advance(time.Minute)
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		done <- h.b.Execute(ctx, func(context.Context) error { close(started); <-release; return nil })
	}()
	<-started
	got = h.collect()
	// The probe is active in the state it was admitted in: half-open, after the open →
	// half-open move its own admission made.
	if v := value(t, got, "breaker.active_calls", name, "circuit_breaker.state=half_open"); v != 1 {
		t.Errorf("active calls during the probe %v, want 1", v)
	}
	if v := value(t, got, "breaker.active_calls", name, "circuit_breaker.state=closed"); v != 0 {
		t.Errorf("closed active calls during the probe %v, want 0", v)
	}
	if v := value(t, got, "breaker.state", name); v != 2 {
		t.Errorf("state gauge %v, want 2 (half-open)", v)
	}
	if _, err := breaker.Call(ctx, h.b, breaker.Callbacks[int]{Closed: func(context.Context) (int, error) { return 1, nil }, Open: fallback}); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got = h.collect()
	if v := value(t, got, "breaker.fallbacks", name, "circuit_breaker.reason=half_open_saturated"); v != 1 {
		t.Errorf("fallbacks (saturated) %v", v)
	}
	if v := value(t, got, "breaker.calls", name, "circuit_breaker.outcome=success", "circuit_breaker.initial_state=half_open", "circuit_breaker.state=closed"); v != 1 {
		t.Errorf("probe calls %v", v)
	}
	if v := value(t, got, "breaker.transitions", name, "circuit_breaker.from_state=open", "circuit_breaker.to_state=half_open", "circuit_breaker.cause=timeout"); v != 1 {
		t.Errorf("transitions open→half-open %v", v)
	}
	if v := value(t, got, "breaker.transitions", name, "circuit_breaker.from_state=half_open", "circuit_breaker.to_state=closed"); v != 1 {
		t.Errorf("transitions half-open→closed %v", v)
	}
	value(t, got, "breaker.event.timestamp", name, "circuit_breaker.event=probe", "circuit_breaker.outcome=success")
	if v := value(t, got, "breaker.state", name); v != 0 {
		t.Errorf("state gauge %v, want 0 (closed)", v)
	}
	for _, st := range []string{"closed", "half_open"} {
		if v := value(t, got, "breaker.active_calls", name, "circuit_breaker.state="+st); v != 0 {
			t.Errorf("%s active calls %v", st, v)
		}
	}

	// A failure with a fallback.
	if r, _ := breaker.Call(ctx, h.b, breaker.Callbacks[int]{Closed: func(context.Context) (int, error) { return 0, errBoom }, Open: fallback}); r != -1 {
		t.Fatal("fallback not run on failure")
	}
	// A panic, recorded under the panic value's type.
	func() {
		defer func() { _ = recover() }()
		_ = h.b.Execute(ctx, func(context.Context) error { panic("kaboom") })
	}()
	got = h.collect()
	if v := value(t, got, "breaker.fallbacks", name, "circuit_breaker.reason=failure"); v != 1 {
		t.Errorf("fallbacks (failure) %v", v)
	}
	if v := value(t, got, "breaker.callback_failures", name, "exception.type=panic string"); v != 1 {
		t.Errorf("callback failures (panic) %v", v)
	}

	// Every point carries the breaker's name.
	for n, pts := range got {
		for _, p := range pts {
			if !strings.Contains(p.attrs, name) {
				t.Errorf("%s{%s} lacks %s", n, p.attrs, name)
			}
		}
	}
	want := []string{"breaker.active_calls", "breaker.callback_failures", "breaker.calls", "breaker.event.timestamp",
		"breaker.failures", "breaker.fallbacks", "breaker.state", "breaker.successes", "breaker.transitions"}
	if names := slices.Sorted(mapsKeys(got)); !slices.Equal(names, want) {
		t.Errorf("instruments %v, want %v", names, want)
	}
}

// TestSlowCalls: breaker.slow_calls counts the calls that took at least slowCallDuration,
// and a circuit that opens on them says so in breaker.transitions.
func TestSlowCalls(t *testing.T) {
	h := newHarness(t)
	p := h.b.Policy()
	p.SlowCallDuration = time.Second
	p.SlowCallRatio = 0.5
	if err := h.b.Update(p); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	slow := func(context.Context) error { h.clock.Advance(2 * time.Second); return nil }
	_ = h.b.Execute(ctx, succeed)
	_ = h.b.Execute(ctx, slow)
	_ = h.b.Execute(ctx, slow) // 2 slow calls of 3: opens
	if h.b.State() != breaker.Open {
		t.Fatalf("state %v, want open on slow calls", h.b.State())
	}
	got := h.collect()
	if v := value(t, got, "breaker.slow_calls", name, "circuit_breaker.state=closed"); v != 2 {
		t.Errorf("slow calls = %v, want 2", v)
	}
	if v := value(t, got, "breaker.transitions", name, "circuit_breaker.to_state=open", "circuit_breaker.trigger=slow_call_rate"); v != 1 {
		t.Errorf("slow-call trips = %v, want 1", v)
	}
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func TestPrefix(t *testing.T) {
	for _, prefix := range []string{"backend", ".backend.", "backend."} {
		h := newHarness(t, otelbreaker.WithPrefix(prefix))
		_ = h.b.Execute(context.Background(), succeed)
		got := h.collect()
		if len(got) == 0 {
			t.Fatal("nothing recorded")
		}
		for n := range got {
			if !strings.HasPrefix(n, "backend.breaker.") {
				t.Errorf("prefix %q: metric %q", prefix, n)
			}
		}
		value(t, got, "backend.breaker.calls", name)
	}
}

// TestInspectionRecordsNothing: reading a breaker's state and counts moves no instrument.
func TestInspectionRecordsNothing(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	_ = h.b.Execute(ctx, succeed)
	_ = h.b.Execute(ctx, fail)
	_ = h.b.Execute(ctx, fail)
	before := h.collect()
	for range 100 {
		_ = h.b.State()
		_ = h.b.Counts()
		_ = h.b.Verdict()
		_ = h.b.Name()
		_ = h.b.Policy()
	}
	after := h.collect()
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Errorf("inspection changed the metrics:\nbefore %v\nafter  %v", before, after)
	}
}

// TestAdoptedTransitions: a verdict adopted from elsewhere is a transition like any other,
// told apart by its cause.
func TestAdoptedTransitions(t *testing.T) {
	h := newHarness(t)
	h.b.Adopt(breaker.Verdict{State: breaker.Open, Since: h.clock.Now()})
	got := h.collect()
	if v := value(t, got, "breaker.transitions", name, "circuit_breaker.cause=adopted", "circuit_breaker.to_state=open"); v != 1 {
		t.Errorf("adopted transitions %v", v)
	}
	if v := value(t, got, "breaker.state", name); v != 1 {
		t.Errorf("state %v", v)
	}
}

func TestClose(t *testing.T) {
	h := newHarness(t)
	_ = h.b.Execute(context.Background(), succeed)
	if err := h.obs.Close(); err != nil {
		t.Fatal(err)
	}
	if got := h.collect(); len(got["breaker.state"]) != 0 {
		t.Errorf("gauges still observed after Close: %v", got["breaker.state"])
	}
}

// TestManyBreakers: one observer, several breakers, each counted under its own name.
func TestManyBreakers(t *testing.T) {
	h := newHarness(t)
	var bs []*breaker.Breaker
	for _, n := range []string{"a", "b", "c"} {
		b, err := breaker.New(n, breaker.DefaultPolicy(), breaker.WithObserver(h.obs))
		if err != nil {
			t.Fatal(err)
		}
		bs = append(bs, b)
	}
	for i := range 60 {
		b := bs[i%3]
		for range i % 3 {
			_ = b.Execute(context.Background(), succeed)
		}
	}
	got := h.collect()
	for i, n := range []string{"a", "b", "c"} {
		want := float64(20 * i)
		if i == 0 {
			if len(got["breaker.calls"]) != 2 {
				t.Errorf("a made no call, yet: %v", got["breaker.calls"])
			}
			continue
		}
		if v := value(t, got, "breaker.calls", "circuit_breaker.name="+n); v != want {
			t.Errorf("%s: %v calls, want %v", n, v, want)
		}
	}
}

// TestConcurrent: calls from many goroutines while metrics are collected add up.
func TestConcurrent(t *testing.T) {
	h := newHarness(t)
	other, err := breaker.New("other", breaker.DefaultPolicy(), breaker.WithObserver(h.obs))
	if err != nil {
		t.Fatal(err)
	}
	p := breaker.DefaultPolicy()
	p.MinimumThroughput = 1 << 30
	_ = h.b.Update(p)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
				var rm metricdata.ResourceMetrics
				_ = h.reader.Collect(context.Background(), &rm) // t.Fatal is for the test's goroutine
			}
		}
	}()
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				b := h.b
				if (g+i)%2 == 0 {
					b = other
				}
				_ = b.Execute(context.Background(), succeed)
			}
		}()
	}
	wg.Wait()
	close(stop)
	got := h.collect()
	total := 0.0
	for _, p := range got["breaker.calls"] {
		total += p.value
	}
	if total != 8*500 {
		t.Errorf("%v calls counted, want %d", total, 8*500)
	}
	for _, n := range []string{name, "circuit_breaker.name=other"} {
		if v := value(t, got, "breaker.active_calls", n, "circuit_breaker.state=closed"); v != 0 {
			t.Errorf("%s: %v active calls after all ended", n, v)
		}
	}
}

// TestGroupMembersShareASeries: the breakers of a Group are labelled with the Group's
// name, so the number of series does not grow with the keys.
func TestGroupMembersShareASeries(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	obs, err := otelbreaker.New(mp)
	if err != nil {
		t.Fatal(err)
	}
	g, err := registry.NewGroup("hosts", breaker.DefaultPolicy(), breaker.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 50 {
		_ = g.Get(fmt.Sprintf("host-%d", i)).Execute(ctx, succeed)
	}
	h := &harness{t: t, reader: reader}
	got := h.collect()
	if v := value(t, got, "breaker.calls", "circuit_breaker.name=hosts", "circuit_breaker.outcome=success"); v != 50 {
		t.Errorf("calls of the Group = %v, want 50 in one series", v)
	}
	for n, pts := range got {
		for _, p := range pts {
			if strings.Contains(p.attrs, "host-") {
				t.Errorf("%s{%s}: a series per key", n, p.attrs)
			}
		}
	}
	if _, ok := got["breaker.state"]; ok {
		t.Errorf("a Group has a state gauge: %v", got["breaker.state"])
	}
}
