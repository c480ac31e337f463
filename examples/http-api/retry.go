package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/httpbreaker"
)

// retryWithinBudget asks a quotes API that turns flaky, through a transport that retries
// failed GETs, and shows the breaker's retry budget (docs/design.md §5.15) allowing retries
// while they are few next to the first attempts, then refusing one: over the window, the
// retries may be at most 20% of the first attempts.
func retryWithinBudget(ctx context.Context, out io.Writer) error {
	api := newQuotesAPI()
	defer api.Close()
	policy := breaker.DefaultPolicy()
	// The circuit never opens on these few calls, so what limits the retries is the
	// budget alone; no floor, so that every retry is earned by first attempts.
	policy.MinimumThroughput = 1000
	policy.RetryBudget = &breaker.RetryBudget{Percent: 20}
	b, err := breaker.New("quotes-api", policy)
	if err != nil {
		return err
	}
	client := &http.Client{Timeout: time.Second, Transport: &httpbreaker.Transport{
		Breaker: b,
		// Up to 3 attempts; a failed GET is retried after a short jittered backoff, each
		// retry drawn from the budget.
		Retry: &httpbreaker.Retry{Attempts: 3, Base: 10 * time.Millisecond, Max: 50 * time.Millisecond},
	}}
	quote := func(n int, quiet bool) error {
		before := api.received()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/quotes/%d", api.URL, n), nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		sent := times(api.received() - before)
		switch {
		case resp.StatusCode == http.StatusOK && !quiet:
			fmt.Fprintf(out, "  quote %d: %s (sent %s)\n", n, body, sent)
		case resp.StatusCode != http.StatusOK:
			tr := b.Traffic()
			first := tr.Requests - tr.Retries - tr.Throttled
			fmt.Fprintf(out, "  quote %d: the API answered %s, sent %s: the budget refused a retry (%d retries made; 20%% of %d first attempts allows %.1f)\n",
				n, resp.Status, sent, tr.Retries, first, 0.2*float64(first))
		}
		return nil
	}

	fmt.Fprintln(out, "The quotes API is up; retries are budgeted at 20% of first attempts.")
	for n := 1; n <= 10; n++ {
		if err := quote(n, true); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "  quotes 1 to 10 answered, each sent once\n")
	fmt.Fprintln(out, "The quotes API turns flaky: it fails every other request.")
	api.setFlaky()
	for n := 11; n <= 13; n++ {
		if err := quote(n, false); err != nil {
			return err
		}
	}
	return nil
}

// quotesAPI answers GET /quotes/{n}; once flaky, it answers 503 to every other request,
// starting with the first.
type quotesAPI struct {
	*httptest.Server
	mu    sync.Mutex
	count int
	flaky int // requests since it turned flaky; -1 while it is not
}

func newQuotesAPI() *quotesAPI {
	a := &quotesAPI{flaky: -1}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		a.mu.Lock()
		a.count++
		fail := false
		if a.flaky >= 0 {
			a.flaky++
			fail = a.flaky%2 == 1
		}
		a.mu.Unlock()
		if fail {
			http.Error(w, "try again", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, `"the best way out is always through"`)
	}))
	return a
}

func (a *quotesAPI) received() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.count
}

func (a *quotesAPI) setFlaky() {
	a.mu.Lock()
	a.flaky = 0
	a.mu.Unlock()
}

func times(n int) string {
	switch n {
	case 1:
		return "once"
	case 2:
		return "twice"
	}
	return fmt.Sprintf("%d times", n)
}
