package breaker_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
)

// A breaker with MaxInFlight refuses a call over its limit with ErrConcurrencyLimited,
// which is not ErrOpen: the circuit stays closed and nothing is recorded. Call runs the
// fallback for it.
func ExampleErrConcurrencyLimited() {
	b, err := breaker.New("search", breaker.Policy{MaxInFlight: 1})
	if err != nil {
		panic(err)
	}
	_ = b.Execute(context.Background(), func(ctx context.Context) error {
		// One call in flight: a second one is over the limit.
		err := b.Execute(ctx, func(context.Context) error { return nil })
		fmt.Println(errors.Is(err, breaker.ErrConcurrencyLimited), errors.Is(err, breaker.ErrOpen))
		res, _ := breaker.Call(ctx, b, breaker.Callbacks[string]{
			Closed: func(context.Context) (string, error) { return "fresh results", nil },
			Open:   func(context.Context, error) (string, error) { return "cached results", nil },
		})
		fmt.Println(res)
		return nil
	})
	tr := b.Traffic()
	fmt.Println(b.State(), b.Counts().Calls, tr.Limit, tr.InFlightPeak, tr.Limited)
	// Output:
	// true false
	// cached results
	// closed 1 1 1 2
}
