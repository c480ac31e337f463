// Bulkhead shows one limit on calls in flight shared by a fleet (docs/design.md §5.18): a
// dependency that can take 6 calls at once, called by 3 pods, each of which tries 10 at
// once. Each pod's breaker has its share of the limit, as the operator publishes it to
// the pods of a CircuitBreaker with spec.concurrency: the calls past a pod's share are
// refused with ErrConcurrencyLimited (not ErrOpen, not a failure: the circuit stays
// closed) and answered by the pod's fallback, and the fleet never has more than 6 in
// flight. Beside it, a per-pod limit of 6 each (what a bulkhead held in each process
// gives) lets the fleet put three times the dependency's capacity on it. Then the fleet
// doubles, the operator recounts it, and each share halves.
//
// The calls are admitted with Allow and held open until every pod has called, so that
// they are all in flight at once.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
)

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// capacity is the dependency's: spec.concurrency.maxInFlight of its CircuitBreaker.
const capacity = 6

// callers is how many calls each pod makes at once.
const callers = 10

func run(_ context.Context, out io.Writer) error {
	fmt.Fprintf(out, "inventory-db takes %d calls in flight; each pod makes %d at once.\n", capacity, callers)
	for _, pods := range []int{3, 6} {
		// The operator's share: the limit divided among the pods it counts, at least 1.
		share := max(1, capacity/pods)
		fleet, err := fleetInFlight(out, pods, share)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%d pods, a share of %d each: the fleet had %d calls in flight (limit %d).\n", pods, share, fleet, capacity)
	}
	fleet, err := fleetInFlight(io.Discard, 3, capacity)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "Per-pod limits of %d each instead: 3 pods had %d calls in flight, %d times the capacity.\n", capacity, fleet, fleet/capacity)
	return nil
}

// fleetInFlight has each of pods pods, whose breaker limits it to limit calls in flight,
// make callers calls at once, and returns how many the fleet had in flight together.
func fleetInFlight(out io.Writer, pods, limit int) (int, error) {
	var held []func(error) // every call in flight, ended once every pod has called
	defer func() {
		for _, done := range held {
			done(nil)
		}
	}()
	for i := 1; i <= pods; i++ {
		p := breaker.DefaultPolicy()
		p.MaxInFlight = limit
		b, err := breaker.New(fmt.Sprintf("inventory-db/pod-%d", i), p)
		if err != nil {
			return 0, err
		}
		admitted, limited := 0, 0
		for range callers {
			done, err := b.Allow()
			switch {
			case err == nil:
				held, admitted = append(held, done), admitted+1
			case errors.Is(err, breaker.ErrConcurrencyLimited):
				limited++ // the fallback answers: a cached stock level, say
			default:
				return 0, err
			}
		}
		fmt.Fprintf(out, "  pod-%d: %d in flight, %d refused by the limit (answered by the fallback); circuit %s\n", i, admitted, limited, b.State())
	}
	return len(held), nil
}
