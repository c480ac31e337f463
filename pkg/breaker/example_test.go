package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/observe"
	"github.com/fusebox-dev/fusebox/pkg/breaker/registry"
)

func ExampleBreaker_Execute() {
	p := breaker.DefaultPolicy()
	p.MinimumThroughput = 3
	b, err := breaker.New("inventory", p)
	if err != nil {
		panic(err)
	}
	unavailable := errors.New("inventory unavailable")
	for range 4 {
		err := b.Execute(context.Background(), func(ctx context.Context) error {
			return unavailable // the dependency is down
		})
		fmt.Println(err, errors.Is(err, breaker.ErrOpen))
	}
	// Output:
	// inventory unavailable false
	// inventory unavailable false
	// inventory unavailable false
	// breaker "inventory": circuit open true
}

func ExampleCall() {
	p := breaker.DefaultPolicy()
	p.MinimumThroughput = 1
	b, _ := breaker.New("prices", p)
	cb := breaker.Callbacks[string]{
		Closed: func(ctx context.Context) (string, error) {
			return "", errors.New("timeout talking to prices")
		},
		Open: func(ctx context.Context, cause error) (string, error) {
			if errors.Is(cause, breaker.ErrOpen) {
				return "cached price (circuit open)", nil
			}
			return "cached price (" + cause.Error() + ")", nil
		},
	}
	for range 2 {
		price, _ := breaker.Call(context.Background(), b, cb)
		fmt.Println(price)
	}
	// Output:
	// cached price (timeout talking to prices)
	// cached price (circuit open)
}

func ExampleBreaker_Allow() {
	b, _ := breaker.New("search", breaker.DefaultPolicy())
	done, err := b.Allow()
	if err != nil {
		fmt.Println("short-circuited:", err)
		return
	}
	// ... call the dependency however suits, for example from a streaming loop ...
	var callErr error
	done(callErr) // report the outcome exactly once
	fmt.Println(b.State(), b.Counts().Calls)
	// Output: closed 1
}

// An observer sees every transition, after the breaker's lock is released.
type logTransitions struct{}

func (logTransitions) OnTransition(t observe.Transition) {
	fmt.Printf("%s: %v -> %v (%v)\n", t.Breaker, t.From, t.To, t.Reason)
}

func ExampleWithObserver() {
	b, _ := breaker.New("mail", breaker.DefaultPolicy(), breaker.WithObserver(logTransitions{}))
	b.Trip()
	// Output: mail: closed -> open (Manual)
}

func ExampleRegistry() {
	reg, _ := registry.New(breaker.DefaultPolicy())
	payments := reg.Get("payments")
	payments.Trip()

	tighter := breaker.DefaultPolicy()
	tighter.OpenTimeout = 5 * time.Second
	err := reg.Apply(map[string]breaker.Policy{"payments": tighter})
	fmt.Println(err, payments.State(), payments.Policy().OpenTimeout)

	broken := tighter
	broken.FailureRatio = 1.5
	fmt.Println(reg.Apply(map[string]breaker.Policy{"payments": broken}))
	// Output:
	// <nil> open 5s
	// breaker "payments": breaker: invalid failureRatio 1.5: must be between 0 and 1 (0 means the default)
}

// One tenant's failures open the circuit for that tenant alone; the others keep being
// served. Each tenant's breaker is created on first use, named "<group>/<key>".
func ExampleGroup() {
	p := breaker.DefaultPolicy()
	p.MinimumThroughput = 3
	tenants, err := registry.NewGroup("tenant-db", p)
	if err != nil {
		panic(err)
	}
	tenants.SetMaxKeys(10_000) // at most this many tenants' breakers; idle closed ones go first

	query := func(tenant string) error {
		return tenants.Get(tenant).Execute(context.Background(), func(ctx context.Context) error {
			if tenant == "acme" {
				return errors.New("acme's shard is down")
			}
			return nil
		})
	}
	for range 3 {
		_ = query("acme")
	}
	fmt.Println("acme:", query("acme"))
	fmt.Println("globex:", query("globex"))

	s := tenants.Summary()
	fmt.Println(s.Keys, "keys,", s.Open, "open:", s.Worst, s.State)
	// Output:
	// acme: breaker "tenant-db/acme": circuit open
	// globex: <nil>
	// 2 keys, 1 open: [acme] open
}

// A zero Policy, or zero fields of one, take DefaultPolicy's values: say only what
// differs.
func ExamplePolicy() {
	b, err := breaker.New("inventory", breaker.Policy{OpenTimeout: time.Minute})
	if err != nil {
		panic(err)
	}
	p := b.Policy()
	fmt.Println(p.OpenTimeout, p.Window, p.FailureRatio, p.MinimumThroughput, p.Mode)
	// Output:
	// 1m0s 10s 0.5 20 Enforce
}

// Retry retries a failing call through the breaker's retry budget: here 20% of first
// attempts and no floor, so a breaker that has run nothing yet has no retry to give.
func ExampleRetry() {
	b, _ := breaker.New("quotes", breaker.Policy{RetryBudget: &breaker.RetryBudget{Percent: 20}})
	attempts := 0
	err := breaker.Retry(context.Background(), b, 3, func(context.Context) error {
		attempts++
		return errors.New("503 from the quotes API")
	}, breaker.WithBackoff(0, 0))
	fmt.Println(attempts, errors.Is(err, breaker.ErrRetryBudget))
	// Output: 1 true
}
