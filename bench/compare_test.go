package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/sony/gobreaker/v2"
)

// Every library gets the policy of breaker.DefaultPolicy, as near as it can say it: open at
// a 50% failure rate over at least 20 calls in a ~10-20s rolling window, stay open 30s, close
// after 2 probe successes, one probe at a time.

var errFail = errors.New("dependency failed")

func ok() error { return nil }

// failEvery10th fails one call in ten: far under the 50% ratio, so every library stays
// closed and the cost measured is that of recording failures.
func failEvery10th(i int) error {
	if i%10 == 0 {
		return errFail
	}
	return nil
}

func newFusebox(b *testing.B) *breaker.Breaker {
	br, err := breaker.New("bench", breaker.DefaultPolicy())
	if err != nil {
		b.Fatal(err)
	}
	return br
}

func newGobreaker() *gobreaker.CircuitBreaker[struct{}] {
	return gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{
		Name:         "bench",
		MaxRequests:  1,
		Interval:     20 * time.Second,
		BucketPeriod: 10 * time.Second,
		Timeout:      30 * time.Second,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			return c.Requests >= 20 && float64(c.TotalFailures)/float64(c.Requests) >= 0.5
		},
		IsExcluded: func(err error) bool { return errors.Is(err, context.Canceled) },
	})
}

func newGobreakerTwoStep() *gobreaker.TwoStepCircuitBreaker[struct{}] {
	return gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        "bench",
		MaxRequests: 1,
		Interval:    20 * time.Second, BucketPeriod: 10 * time.Second,
		Timeout: 30 * time.Second,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			return c.Requests >= 20 && float64(c.TotalFailures)/float64(c.Requests) >= 0.5
		},
	})
}

func newFailsafe() circuitbreaker.CircuitBreaker[any] {
	return circuitbreaker.NewBuilder[any]().
		WithFailureRateThreshold(0.5, 20, 10*time.Second).
		WithDelay(30 * time.Second).
		WithSuccessThreshold(2).
		Build()
}

// record keeps every benchmark run's ns/op, for the summary TestMain prints.
var results = struct {
	sync.Mutex
	runs map[string][]run // by benchmark name
}{runs: map[string][]run{}}

type run struct {
	n  int
	ns float64
}

func record(b *testing.B) {
	if b.N == 0 {
		return
	}
	results.Lock()
	results.runs[b.Name()] = append(results.runs[b.Name()], run{b.N, float64(b.Elapsed().Nanoseconds()) / float64(b.N)})
	results.Unlock()
}

func BenchmarkClosedSuccess(b *testing.B) {
	ctx := context.Background()
	b.Run("impl=fusebox", func(b *testing.B) {
		br := newFusebox(b)
		fn := func(context.Context) error { return nil }
		b.ReportAllocs()
		for b.Loop() {
			_ = br.Execute(ctx, fn)
		}
		record(b)
	})
	b.Run("impl=fusebox-slowcalls", func(b *testing.B) {
		// The same, with every call timed for slow-call judging (slowCallDuration 2s).
		p := breaker.DefaultPolicy()
		p.SlowCallDuration = 2 * time.Second
		br, err := breaker.New("bench", p)
		if err != nil {
			b.Fatal(err)
		}
		fn := func(context.Context) error { return nil }
		b.ReportAllocs()
		for b.Loop() {
			_ = br.Execute(ctx, fn)
		}
		record(b)
	})
	b.Run("impl=gobreaker", func(b *testing.B) {
		cb := newGobreaker()
		fn := func() (struct{}, error) { return struct{}{}, nil }
		b.ReportAllocs()
		for b.Loop() {
			_, _ = cb.Execute(fn)
		}
		record(b)
	})
	b.Run("impl=failsafe", func(b *testing.B) {
		exec := failsafe.With[any](newFailsafe())
		b.ReportAllocs()
		for b.Loop() {
			_ = exec.Run(ok)
		}
		record(b)
	})
}

func BenchmarkClosedTwoStep(b *testing.B) {
	b.Run("impl=fusebox", func(b *testing.B) {
		br := newFusebox(b)
		b.ReportAllocs()
		for b.Loop() {
			if done, err := br.Allow(); err == nil {
				done(nil)
			}
		}
		record(b)
	})
	b.Run("impl=gobreaker", func(b *testing.B) {
		cb := newGobreakerTwoStep()
		b.ReportAllocs()
		for b.Loop() {
			if done, err := cb.Allow(); err == nil {
				done(nil)
			}
		}
		record(b)
	})
	b.Run("impl=failsafe", func(b *testing.B) {
		cb := newFailsafe()
		b.ReportAllocs()
		for b.Loop() {
			if cb.TryAcquirePermit() {
				cb.RecordSuccess()
			}
		}
		record(b)
	})
}

func BenchmarkClosed10PctFailures(b *testing.B) {
	ctx := context.Background()
	b.Run("impl=fusebox", func(b *testing.B) {
		br := newFusebox(b)
		i := 0
		fn := func(context.Context) error { i++; return failEvery10th(i) }
		b.ReportAllocs()
		for b.Loop() {
			_ = br.Execute(ctx, fn)
		}
		record(b)
		if br.State() != breaker.Closed {
			b.Fatal("opened")
		}
	})
	b.Run("impl=gobreaker", func(b *testing.B) {
		cb := newGobreaker()
		i := 0
		fn := func() (struct{}, error) { i++; return struct{}{}, failEvery10th(i) }
		b.ReportAllocs()
		for b.Loop() {
			_, _ = cb.Execute(fn)
		}
		record(b)
		if cb.State() != gobreaker.StateClosed {
			b.Fatal("opened")
		}
	})
	b.Run("impl=failsafe", func(b *testing.B) {
		cb := newFailsafe()
		exec := failsafe.With[any](cb)
		i := 0
		fn := func() error { i++; return failEvery10th(i) }
		b.ReportAllocs()
		for b.Loop() {
			_ = exec.Run(fn)
		}
		record(b)
		if !cb.IsClosed() {
			b.Fatal("opened")
		}
	})
}

func BenchmarkOpenShortCircuit(b *testing.B) {
	ctx := context.Background()
	b.Run("impl=fusebox", func(b *testing.B) {
		br := newFusebox(b)
		br.Trip()
		fn := func(context.Context) error { return nil }
		b.ReportAllocs()
		var err error
		for b.Loop() {
			err = br.Execute(ctx, fn)
		}
		record(b)
		if !errors.Is(err, breaker.ErrOpen) {
			b.Fatal(err)
		}
	})
	b.Run("impl=gobreaker", func(b *testing.B) {
		cb := newGobreaker()
		fail := func() (struct{}, error) { return struct{}{}, errFail }
		for range 20 {
			_, _ = cb.Execute(fail)
		}
		fn := func() (struct{}, error) { return struct{}{}, nil }
		b.ReportAllocs()
		var err error
		for b.Loop() {
			_, err = cb.Execute(fn)
		}
		record(b)
		if !errors.Is(err, gobreaker.ErrOpenState) {
			b.Fatal(err)
		}
	})
	b.Run("impl=failsafe", func(b *testing.B) {
		cb := newFailsafe()
		cb.Open()
		exec := failsafe.With[any](cb)
		b.ReportAllocs()
		var err error
		for b.Loop() {
			err = exec.Run(ok)
		}
		record(b)
		if !errors.Is(err, circuitbreaker.ErrOpen) {
			b.Fatal(err)
		}
	})
}

// BenchmarkClosedParallel runs the closed success path on every core at once; ns/op is wall
// time per call across all of them.
func BenchmarkClosedParallel(b *testing.B) {
	ctx := context.Background()
	b.Run("impl=fusebox", func(b *testing.B) {
		br := newFusebox(b)
		fn := func(context.Context) error { return nil }
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_ = br.Execute(ctx, fn)
			}
		})
		record(b)
	})
	b.Run("impl=gobreaker", func(b *testing.B) {
		cb := newGobreaker()
		fn := func() (struct{}, error) { return struct{}{}, nil }
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_, _ = cb.Execute(fn)
			}
		})
		record(b)
	})
	b.Run("impl=failsafe", func(b *testing.B) {
		exec := failsafe.With[any](newFailsafe())
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_ = exec.Run(ok)
			}
		})
		record(b)
	})
}

func TestMain(m *testing.M) {
	code := m.Run()
	summarize()
	os.Exit(code)
}

// summarize prints, per scenario, the median ns/op of each library over the -count runs and
// its ratio to Fusebox's. A b.Loop benchmark is called once per run; a RunParallel one is
// called with b.N = 1, 100, ... while the framework ramps up, and only the last call of each
// ramp is the measurement it reports.
func summarize() {
	results.Lock()
	defer results.Unlock()
	if len(results.runs) == 0 {
		return
	}
	medians := map[string]map[string]float64{} // scenario -> impl -> median
	var scenarios []string
	for name, runs := range results.runs {
		ramps := slices.ContainsFunc(runs, func(r run) bool { return r.n == 1 })
		var finals []float64
		for i, r := range runs {
			if !ramps || i == len(runs)-1 || runs[i+1].n == 1 {
				finals = append(finals, r.ns)
			}
		}
		scenario, impl, _ := strings.Cut(name, "/impl=")
		if medians[scenario] == nil {
			medians[scenario] = map[string]float64{}
			scenarios = append(scenarios, scenario)
		}
		medians[scenario][impl] = median(finals)
	}
	sort.Strings(scenarios)
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "\nscenario\tfusebox ns/op\tgobreaker ns/op\tfailsafe ns/op\tgobreaker/fusebox\tfailsafe/fusebox\t")
	for _, s := range scenarios {
		m := medians[s]
		fmt.Fprintf(w, "%s\t%.1f\t%.1f\t%.1f\t%.1fx\t%.1fx\t\n", strings.TrimPrefix(s, "Benchmark"),
			m["fusebox"], m["gobreaker"], m["failsafe"], m["gobreaker"]/m["fusebox"], m["failsafe"]/m["fusebox"])
	}
	w.Flush()
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	xs = slices.Clone(xs)
	slices.Sort(xs)
	if len(xs)%2 == 1 {
		return xs[len(xs)/2]
	}
	return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
}
