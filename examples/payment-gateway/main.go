// Payment-gateway puts a breaker around a payment provider, as a checkout service would:
// when the provider is down, or the circuit is open, an order is not failed; its payment
// is recorded as pending and charged later, once the provider is back.
//
// Two instances of the gateway take the orders, as two replicas of a checkout service
// would. Each judges its own calls. With REDIS_ADDR set they share their breaker's verdict
// through Redis (pkg/breaker/redisstore): once one instance opens the circuit, the other
// stops calling the provider too, without having to fail first.
//
//	go run ./examples/payment-gateway
//	REDIS_ADDR=localhost:6379 go run ./examples/payment-gateway
package main

import (
	"bytes"
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

	"github.com/redis/go-redis/v9"

	"github.com/fusebox-dev/fusebox/examples/internal/narrate"
	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/redisstore"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Stdout, os.Getenv("REDIS_ADDR")); err != nil {
		fmt.Fprintln(os.Stderr, "payment-gateway:", err)
		os.Exit(1)
	}
}

// run plays the story; with redisAddr set, the gateways share their verdict there.
func run(ctx context.Context, out io.Writer, redisAddr string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out = &lockedWriter{w: out} // verdicts from Redis are printed from the stores' goroutines
	story := narrate.New(out)

	provider := newProvider()
	defer provider.Close()
	book := &orderBook{}

	// The circuit opens once half of at least 4 charges have failed, stays open for a
	// second, and closes after 2 successful probes.
	policy := breaker.DefaultPolicy()
	policy.OpenTimeout = time.Second
	policy.MinimumThroughput = 4
	policy.SuccessThreshold = 2

	var gateways []*gateway
	for _, name := range []string{"checkout-1", "checkout-2"} {
		b, stop, err := newBreaker(ctx, name, policy, story, redisAddr)
		if err != nil {
			return err
		}
		defer stop()
		gateways = append(gateways, &gateway{
			name: name, breaker: b, providerURL: provider.URL, book: book, story: story,
			http: &http.Client{Timeout: 500 * time.Millisecond}, // a breaker helps only if calls fail fast
		})
	}
	checkout1, checkout2 := gateways[0], gateways[1]
	if redisAddr != "" {
		fmt.Fprintf(out, "The gateways share their verdict through Redis at %s.\n", redisAddr)
	} else {
		fmt.Fprintln(out, "Each gateway decides alone (set REDIS_ADDR to share the verdict through Redis).")
	}

	nextOrder := 0
	order := func(g *gateway) error {
		nextOrder++
		return g.checkout(ctx, out, nextOrder, 1000+nextOrder*150)
	}
	pause := func(d time.Duration) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
			return nil
		}
	}

	fmt.Fprintln(out, "The payment provider is up.")
	for _, g := range []*gateway{checkout1, checkout2, checkout1, checkout2} {
		if err := order(g); err != nil {
			return err
		}
	}

	fmt.Fprintln(out, "The payment provider fails: it answers 503. Orders keep coming to checkout-1.")
	provider.setDown(true)
	for checkout1.breaker.State() != breaker.Open {
		if err := order(checkout1); err != nil {
			return err
		}
	}
	if redisAddr != "" {
		// The verdict reaches the other instance asynchronously; no call waits for Redis.
		for checkout2.breaker.State() != breaker.Open {
			if err := pause(10 * time.Millisecond); err != nil {
				return fmt.Errorf("checkout-2 did not learn through Redis that the circuit is open: %w", err)
			}
		}
	}
	fmt.Fprintln(out, "An order comes to checkout-2.")
	before := provider.requests.Load()
	if err := order(checkout2); err != nil {
		return err
	}
	fmt.Fprintf(out, "  the provider received %d request(s) for it\n", provider.requests.Load()-before)

	fmt.Fprintln(out, "The payment provider is back.")
	provider.setDown(false)
	for i := 0; checkout1.breaker.State() != breaker.Closed || checkout2.breaker.State() != breaker.Closed; i++ {
		if err := pause(250 * time.Millisecond); err != nil {
			return fmt.Errorf("circuits still open: %w", err)
		}
		if err := order(gateways[i%2]); err != nil {
			return err
		}
	}

	fmt.Fprintln(out, "Later, the pending payments are processed.")
	for _, o := range book.pending() {
		if err := o.gateway.checkout(ctx, out, o.id, o.amountCents); err != nil {
			return err
		}
	}
	paid, pending := book.counts()
	fmt.Fprintf(out, "%d orders: %d paid, %d pending, none failed.\n", paid+pending, paid, pending)
	return nil
}

// newBreaker returns the breaker of one gateway instance, which prints its transitions,
// and what to call when the instance stops. With redisAddr set, its verdict is shared
// through Redis under the key payment-provider.
func newBreaker(ctx context.Context, instance string, p breaker.Policy, story *narrate.Narrator, redisAddr string) (*breaker.Breaker, func(), error) {
	printer := breaker.WithObserver(story.Observer(narrate.Circuit{
		Prefix:  instance + ": ",
		Failed:  "%d of its last %d charges failed",
		Adopted: "another instance's verdict, through Redis",
	}))
	if redisAddr == "" {
		b, err := breaker.New("payment-provider", p, printer)
		return b, func() {}, err
	}
	// Each instance has a client and a store of its own, as separate processes would.
	client := redis.NewClient(&redis.Options{Addr: redisAddr})
	ping, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := client.Ping(ping).Err(); err != nil {
		_ = client.Close()
		return nil, nil, fmt.Errorf("REDIS_ADDR=%s: %w", redisAddr, err)
	}
	// Short-lived keys under this example's own name: a later run does not inherit an
	// old verdict, and no other application's breaker shares it.
	store, err := redisstore.New(client, redisstore.WithApplication("fusebox-payment-gateway-example"),
		redisstore.WithTTL(time.Minute))
	if err != nil {
		_ = client.Close()
		return nil, nil, err
	}
	stop := func() {
		_ = store.Close() // waits for the store's goroutine: nothing is printed after it
		_ = client.Close()
	}
	b, err := store.NewBreaker("payment-provider", p, printer)
	if err != nil {
		stop()
		return nil, nil, err
	}
	return b, stop, nil
}

// gateway is one instance of the checkout service's payment client.
type gateway struct {
	name        string
	breaker     *breaker.Breaker
	providerURL string
	http        *http.Client
	book        *orderBook
	story       *narrate.Narrator
}

// checkout takes the payment for an order. When the provider cannot take it, because the
// circuit is open or the charge failed, the order goes through anyway: its payment is
// recorded as pending, for later.
func (g *gateway) checkout(ctx context.Context, out io.Writer, id, amountCents int) error {
	defer g.story.CallOver()
	charge, err := breaker.Call(ctx, g.breaker, breaker.Callbacks[string]{
		Closed: func(ctx context.Context) (string, error) {
			return g.charge(ctx, id, amountCents)
		},
		Open: func(_ context.Context, cause error) (string, error) {
			g.book.record(order{id: id, amountCents: amountCents, gateway: g}, "")
			if errors.Is(cause, breaker.ErrOpen) {
				cause = errors.New("provider not called: the circuit is open")
			}
			fmt.Fprintf(out, "  order %d (%s) at %s: payment pending (%v)\n", id, euros(amountCents), g.name, cause)
			return "", nil
		},
	})
	if err != nil {
		return err // not a failure of the provider: ctx is done
	}
	if charge != "" {
		g.book.record(order{id: id, amountCents: amountCents, gateway: g}, charge)
		fmt.Fprintf(out, "  order %d (%s) at %s: paid (%s)\n", id, euros(amountCents), g.name, charge)
	}
	return nil
}

// charge asks the provider to charge an order and returns the charge's id.
func (g *gateway) charge(ctx context.Context, id, amountCents int) (string, error) {
	body, err := json.Marshal(map[string]int{"order": id, "amountCents": amountCents})
	if err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.providerURL+"/charges", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := g.http.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return "", fmt.Errorf("the provider answered %s", resp.Status)
	}
	var charge struct{ ID string }
	if err := json.NewDecoder(resp.Body).Decode(&charge); err != nil {
		return "", fmt.Errorf("the provider's answer: %w", err)
	}
	return charge.ID, nil
}

// order is an order whose payment is pending.
type order struct {
	id, amountCents int
	gateway         *gateway // the instance that took it
}

// orderBook is the shop's record of its orders: the charge that paid each, or none yet.
type orderBook struct {
	mu      sync.Mutex
	charges map[int]string
	waiting []order
}

func (b *orderBook) record(o order, charge string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.charges == nil {
		b.charges = map[int]string{}
	}
	if _, known := b.charges[o.id]; !known && charge == "" {
		b.waiting = append(b.waiting, o)
	}
	b.charges[o.id] = charge
}

// pending returns the orders whose payment is still pending.
func (b *orderBook) pending() []order {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []order
	for _, o := range b.waiting {
		if b.charges[o.id] == "" {
			out = append(out, o)
		}
	}
	return out
}

func (b *orderBook) counts() (paid, pending int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range b.charges {
		if c == "" {
			pending++
		} else {
			paid++
		}
	}
	return paid, pending
}

func euros(cents int) string { return fmt.Sprintf("€%d.%02d", cents/100, cents%100) }

// provider is the local payment provider: it answers 503 to everything while it is down.
type provider struct {
	*httptest.Server
	requests atomic.Int64
	down     atomic.Bool
	charges  atomic.Int64
}

func newProvider() *provider {
	p := &provider{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /charges", func(w http.ResponseWriter, r *http.Request) {
		p.requests.Add(1)
		if p.down.Load() {
			http.Error(w, "payments are unavailable", http.StatusServiceUnavailable)
			return
		}
		var req struct{ Order, AmountCents int }
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.AmountCents <= 0 {
			http.Error(w, "bad charge", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]string{"id": fmt.Sprintf("ch_%d", p.charges.Add(1))})
	})
	p.Server = httptest.NewServer(mux)
	return p
}

func (p *provider) setDown(down bool) { p.down.Store(down) }

// lockedWriter serializes writes, each of which is one line.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
