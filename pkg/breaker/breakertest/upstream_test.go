package breakertest_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakertest"
	"github.com/fusebox-dev/fusebox/pkg/breaker/httpbreaker"
)

func TestUpstreamAnswersInOrder(t *testing.T) {
	u := breakertest.NewUpstream(nil)
	ctx := context.Background()
	u.FailNext(2, errBoom)
	u.RespondNext(1, http.StatusBadGateway)
	u.RespondNext(1, http.StatusNotFound)
	u.FailNext(1, nil)
	var got []string
	for range 6 {
		got = append(got, fmt.Sprint(u.Call(ctx)))
	}
	want := []string{"boom", "boom", "breakertest: upstream answered 502 Bad Gateway", "<nil>", breakertest.ErrInjected.Error(), "<nil>"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("answers %q\nwant    %q", got, want)
	}
	if u.Calls() != 6 || u.Failures() != 4 || u.InFlight() != 0 {
		t.Fatalf("calls %d failures %d in flight %d, want 6, 4, 0", u.Calls(), u.Failures(), u.InFlight())
	}
}

func TestUpstreamStandingAnswerDropsQueue(t *testing.T) {
	u := breakertest.NewUpstream(nil)
	ctx := context.Background()
	u.FailNext(3, errBoom)
	u.Succeed()
	if err := u.Call(ctx); err != nil {
		t.Fatalf("Succeed kept a queued failure: %v", err)
	}
	u.Fail(errBoom)
	u.FailNext(1, errBenign)
	if err := u.Call(ctx); !errors.Is(err, errBenign) {
		t.Fatalf("queued answer: %v, want %v", err, errBenign)
	}
	for range 2 {
		if err := u.Call(ctx); !errors.Is(err, errBoom) {
			t.Fatalf("standing answer: %v, want %v", err, errBoom)
		}
	}
	u.Respond(http.StatusServiceUnavailable)
	var se *breakertest.StatusError
	if err := u.Call(ctx); !errors.As(err, &se) || se.Code != http.StatusServiceUnavailable {
		t.Fatalf("Respond(503): %v, want a StatusError", err)
	}
}

func TestUpstreamRefusesNonStatus(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "42 is not an HTTP status code") {
			t.Fatalf("Respond(42) panicked with %v", r)
		}
	}()
	breakertest.NewUpstream(nil).Respond(42)
}

func TestUpstreamOverHTTP(t *testing.T) {
	u := breakertest.NewUpstream(nil)
	srv := httptest.NewServer(u)
	defer srv.Close()
	u.FailNext(1, errBoom)
	u.RespondNext(1, http.StatusTooManyRequests)
	for _, want := range []struct {
		status int
		body   string
	}{
		{http.StatusServiceUnavailable, "boom\n"},
		{http.StatusTooManyRequests, "Too Many Requests\n"},
		{http.StatusOK, "OK\n"},
	} {
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != want.status || string(body) != want.body {
			t.Fatalf("got %d %q, want %d %q", resp.StatusCode, body, want.status, want.body)
		}
	}
	if u.Calls() != 3 || u.Failures() != 1 {
		t.Fatalf("calls %d failures %d, want 3 and 1", u.Calls(), u.Failures())
	}
}

// On a fake Clock a slow call advances the Clock by its delay, at once.
func TestUpstreamSlowOnClock(t *testing.T) {
	clock := breakertest.NewClock(start)
	u := breakertest.NewUpstream(clock)
	u.Slow(time.Hour)
	u.FailNext(1, errBoom)
	// Calls that slept their hour in real time would end with this context instead.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := u.Call(ctx); !errors.Is(err, errBoom) {
		t.Fatalf("slow failure: %v", err)
	}
	if err := u.Call(ctx); err != nil {
		t.Fatalf("slow success: %v", err)
	}
	if clock.Monotonic() != 2*time.Hour || !clock.Now().Equal(start.Add(2*time.Hour)) {
		t.Fatalf("clock at %v (%v), want 2h on", clock.Monotonic(), clock.Now())
	}
	// Concurrent calls each let their delay pass.
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() { _ = u.Call(context.Background()) })
	}
	wg.Wait()
	if clock.Monotonic() != 12*time.Hour {
		t.Fatalf("clock at %v after 10 more calls, want 12h", clock.Monotonic())
	}
	// A call whose context is done returns at once, without letting time pass.
	done, cancelDone := context.WithCancel(context.Background())
	cancelDone()
	if err := u.Call(done); !errors.Is(err, context.Canceled) || clock.Monotonic() != 12*time.Hour {
		t.Fatalf("cancelled call: %v, clock at %v", err, clock.Monotonic())
	}
}

// On real time a slow call sleeps, and gives up with its context.
func TestUpstreamSlowInRealTime(t *testing.T) {
	u := breakertest.NewUpstream(nil)
	u.Slow(20 * time.Millisecond)
	began := time.Now()
	if err := u.Call(context.Background()); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took < 20*time.Millisecond {
		t.Fatalf("returned after %v, want at least 20ms", took)
	}

	u.Slow(time.Hour)
	u.Fail(errBoom)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- u.Call(ctx) }()
	for u.InFlight() == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled slow call returned %v", err)
	}
	if u.InFlight() != 0 || u.Failures() != 0 || u.Calls() != 2 {
		t.Fatalf("in flight %d, failures %d, calls %d; want 0, 0 (it never answered), 2", u.InFlight(), u.Failures(), u.Calls())
	}
}

// A slow HTTP answer ends with the client's request: the server's handler sees it go.
func TestUpstreamSlowOverHTTPGivesUp(t *testing.T) {
	u := breakertest.NewUpstream(nil)
	u.Slow(time.Hour)
	srv := httptest.NewServer(u)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	if _, err := http.DefaultClient.Do(req); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("client got %v, want its deadline", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for u.InFlight() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the handler is still sleeping after the client gave up")
		}
		time.Sleep(time.Millisecond)
	}
}

// Behind a breaker, calls a short-circuit refuses never reach the Upstream.
func TestUpstreamBehindBreaker(t *testing.T) {
	b, clock, rec := newBreaker(t, func(p *breaker.Policy) { p.MinimumThroughput = 4 })
	u := breakertest.NewUpstream(clock)
	u.Fail(errBoom)
	ctx := context.Background()
	for range 10 {
		_ = b.Execute(ctx, u.Call)
	}
	if u.Calls() != 4 {
		t.Fatalf("upstream reached %d times, want 4: the breaker should refuse the rest", u.Calls())
	}
	u.Succeed()
	if err := breakertest.Closed(b, clock); err != nil {
		t.Fatal(err)
	}
	rec.AssertStates(t, "closed→open", "open→half_open", "half_open→closed")
}

// Behind httpbreaker's Handler, the Upstream's 5xx answers open the circuit, and the
// Handler sheds the rest without reaching it.
func TestUpstreamBehindHTTPHandler(t *testing.T) {
	b, clock, rec := newBreaker(t, func(p *breaker.Policy) { p.MinimumThroughput = 2 })
	u := breakertest.NewUpstream(clock)
	srv := httptest.NewServer(httpbreaker.NewHandler(b, u))
	defer srv.Close()
	u.Respond(http.StatusInternalServerError)
	var got []int
	for range 3 {
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		got = append(got, resp.StatusCode)
	}
	if fmt.Sprint(got) != "[500 500 503]" || u.Calls() != 2 {
		t.Fatalf("statuses %v with %d calls upstream, want [500 500 503] and 2", got, u.Calls())
	}
	rec.AssertStates(t, "closed→open")
}

// Upstream plays a dependency that fails, recovers and answers on command.
func ExampleUpstream() {
	clock := breakertest.NewClock(time.Now())
	p := breaker.DefaultPolicy()
	p.MinimumThroughput = 3
	b, _ := breaker.New("inventory", p, breaker.WithClock(clock))
	inventory := breakertest.NewUpstream(clock)

	inventory.FailNext(3, errors.New("inventory unavailable"))
	ctx := context.Background()
	for range 4 {
		fmt.Println(b.Execute(ctx, inventory.Call))
	}
	fmt.Println("calls that reached inventory:", inventory.Calls())
	// Output:
	// inventory unavailable
	// inventory unavailable
	// inventory unavailable
	// breaker "inventory": circuit open
	// calls that reached inventory: 3
}

// Upstream is an http.Handler too: here behind httpbreaker's Transport, answering 503 on
// command.
func ExampleUpstream_ServeHTTP() {
	upstream := breakertest.NewUpstream(nil)
	srv := httptest.NewServer(upstream)
	defer srv.Close()

	p := breaker.DefaultPolicy()
	p.MinimumThroughput = 2
	b, _ := breaker.New("search", p)
	client := &http.Client{Transport: httpbreaker.NewTransport(b, nil)}

	upstream.Respond(http.StatusServiceUnavailable)
	for range 3 {
		resp, err := client.Get(srv.URL)
		if err != nil {
			fmt.Println(errors.Is(err, breaker.ErrOpen))
			continue
		}
		_ = resp.Body.Close()
		fmt.Println(resp.StatusCode)
	}
	// Output:
	// 503
	// 503
	// true
}
