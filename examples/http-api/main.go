// Http-api wraps a real HTTP call in a breaker with httpbreaker.Transport: answers of the
// API that say it is unwell (5xx, timeouts, refused connections) count as failures, while
// a 4xx answer, the caller's own mistake, proves the API is up and does not. While the
// circuit is open, or when a call fails, the client answers from its cache of earlier
// answers instead of failing.
//
// It starts a local users API, asks it for users that exist and users that do not, makes
// it fail and recover, and prints each answer and every change of the circuit's state.
// Then it retries the requests to a flaky quotes API through a retry budget, until the
// budget refuses a retry (retry.go):
//
//	go run ./examples/http-api
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fusebox-dev/fusebox/examples/internal/narrate"
	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/httpbreaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/observe"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "http-api:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()

	api := newUsersAPI()
	defer api.Close()

	// The circuit opens once half of at least 4 calls have failed, stays open for a
	// second, and closes after 2 successful probes.
	policy := breaker.DefaultPolicy()
	policy.OpenTimeout = time.Second
	policy.MinimumThroughput = 4
	policy.SuccessThreshold = 2
	var entered [3]int // transitions into each state, so that the story can wait for one
	story := narrate.New(out)
	b, err := breaker.New("users-api", policy, breaker.WithObserver(story.Observer(narrate.Circuit{
		Failed: "%d of the last %d calls failed",
		Seen:   func(t observe.Transition) { entered[t.To]++ },
	})))
	if err != nil {
		return err
	}
	users := &usersClient{
		baseURL: api.URL,
		// The breaker sits in the transport: every request through this client is judged,
		// and none is sent while the circuit is open.
		http:  &http.Client{Transport: httpbreaker.NewTransport(b, nil), Timeout: time.Second},
		cache: map[string]user{},
	}
	get := func(id string) {
		u, cause, err := users.get(ctx, id)
		switch {
		case err != nil:
			fmt.Fprintf(out, "  user %s: %v\n", id, err)
		case cause != nil:
			fmt.Fprintf(out, "  user %s: %s, from the cache (%v)\n", id, u.Name, cause)
		default:
			fmt.Fprintf(out, "  user %s: %s\n", id, u.Name)
		}
		story.CallOver()
	}
	pause := func(d time.Duration) error {
		select {
		case <-ctx.Done():
			return fmt.Errorf("circuit %v: %w", b.State(), ctx.Err())
		case <-time.After(d):
			return nil
		}
	}

	fmt.Fprintln(out, "The API is up.")
	for _, id := range []string{"1", "2"} {
		get(id)
	}

	fmt.Fprintln(out, "Users who do not exist: the API answers 404, the caller's mistake, not an outage.")
	for _, id := range []string{"7", "8", "9", "10"} {
		get(id)
	}
	c := b.Counts()
	fmt.Fprintf(out, "  the circuit is %v: %d calls, %d failures\n", b.State(), c.Calls, c.Failures)

	fmt.Fprintln(out, "The API fails: it answers 503 Service Unavailable.")
	api.setDown(true)
	for i := 0; entered[breaker.Open] == 0; i++ {
		get([]string{"1", "2"}[i%2])
		if err := pause(100 * time.Millisecond); err != nil {
			return err
		}
	}
	before := api.requests.Load()
	for _, id := range []string{"1", "2", "3"} {
		get(id)
	}
	fmt.Fprintf(out, "  the API received %d of those 3 requests\n", api.requests.Load()-before)

	fmt.Fprintln(out, "The API is back.")
	api.setDown(false)
	for i := 0; entered[breaker.Closed] == 0; i++ {
		if err := pause(250 * time.Millisecond); err != nil {
			return err
		}
		get([]string{"1", "2"}[i%2])
	}
	get("3")
	return retryWithinBudget(ctx, out)
}

// user is what the API answers.
type user struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// usersClient asks the users API, and remembers its last good answer for each user.
type usersClient struct {
	baseURL string
	http    *http.Client
	cache   map[string]user
}

// get returns the user id. When the API cannot answer, because the circuit is open or the
// call failed, it returns the cached user and why the API did not answer (cause); an
// answer that says the request was wrong (4xx) is an error, with no cache: asking again
// would not help.
func (c *usersClient) get(ctx context.Context, id string) (u user, cause, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.baseURL+"/users/"+id, nil)
	if err != nil {
		return user{}, nil, err
	}
	resp, err := c.http.Do(req)
	if errors.Is(err, breaker.ErrOpen) {
		return c.cached(id, errors.New("not sent: the circuit is open"))
	}
	if err != nil {
		return c.cached(id, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode >= 500:
		return c.cached(id, fmt.Errorf("the API answered %s", resp.Status))
	case resp.StatusCode != http.StatusOK:
		return user{}, nil, fmt.Errorf("the API answered %s (not a failure of the API: the circuit stays closed)", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&u); err != nil {
		return user{}, nil, fmt.Errorf("user %s: %w", id, err)
	}
	c.cache[id] = u
	return u, nil, nil
}

func (c *usersClient) cached(id string, cause error) (user, error, error) {
	u, ok := c.cache[id]
	if !ok {
		return user{}, nil, fmt.Errorf("unavailable, and not in the cache (%w)", cause)
	}
	return u, cause, nil
}

// usersAPI is the local API the example calls. It knows users 1 to 3, and answers 503 to
// everything while it is down.
type usersAPI struct {
	*httptest.Server
	requests atomic.Int64
	mu       sync.Mutex
	down     bool
}

func newUsersAPI() *usersAPI {
	names := map[string]string{"1": "Ada Lovelace", "2": "Alan Turing", "3": "Grace Hopper"}
	a := &usersAPI{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /users/{id}", func(w http.ResponseWriter, r *http.Request) {
		a.requests.Add(1)
		a.mu.Lock()
		down := a.down
		a.mu.Unlock()
		id := r.PathValue("id")
		name, ok := names[id]
		switch {
		case down:
			http.Error(w, "try again later", http.StatusServiceUnavailable)
		case !ok:
			http.Error(w, "no such user", http.StatusNotFound)
		default:
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(user{ID: id, Name: name})
		}
	})
	a.Server = httptest.NewServer(mux)
	return a
}

func (a *usersAPI) setDown(down bool) {
	a.mu.Lock()
	a.down = down
	a.mu.Unlock()
}
