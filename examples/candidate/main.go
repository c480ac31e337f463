// Candidate shows a candidate policy judged in shadow (docs/design.md §11): a breaker
// enforces a tolerant policy while a too-tight candidate is tried on the same calls.
// A blip of failures (one call in five) is ridden out by the enforced policy, which
// refuses nothing, while the candidate opens on it and counts every call it would
// have refused; after its open period it half-opens on the calls that run, and closes
// again once they succeed. The comparison at the end is what `kubectl fusebox candidate`
// shows for a fleet.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
)

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

var errUnavailable = errors.New("dependency unavailable")

func run(ctx context.Context, out io.Writer) error {
	// The enforced policy: open at half of at least 20 calls failing.
	enforced := breaker.DefaultPolicy()
	b, err := breaker.New("inventory", enforced)
	if err != nil {
		return err
	}
	// The candidate: open at a fifth of at least 5 calls, for 500ms.
	candidate := breaker.DefaultPolicy()
	candidate.FailureRatio, candidate.MinimumThroughput = 0.2, 5
	candidate.OpenTimeout, candidate.SuccessThreshold = 500*time.Millisecond, 2
	if err := b.SetCandidate(&candidate); err != nil {
		return err
	}
	fmt.Fprintf(out, "Enforced: open at %.0f%% of %d calls. Candidate: open at %.0f%% of %d calls, for %s.\n",
		100*enforced.FailureRatio, enforced.MinimumThroughput, 100*candidate.FailureRatio, candidate.MinimumThroughput, candidate.OpenTimeout)

	// A blip: the fifth call fails, the others answer.
	refused := 0
	for i := 1; i <= 12; i++ {
		var fail error
		if i == 5 {
			fail = errUnavailable
		}
		err := b.Execute(ctx, func(context.Context) error { return fail })
		if errors.Is(err, breaker.ErrOpen) {
			refused++
		}
		st, _ := b.Candidate()
		fmt.Fprintf(out, "call %2d: %-24s enforced %-6s candidate %-9s would have refused %d\n", i, outcome(err), b.State(), st.State, st.WouldRefuse)
	}
	fmt.Fprintf(out, "The enforced policy rode the blip out: it refused %d calls.\n", refused)

	// After the candidate's open period it judges probes taken from the calls that run.
	time.Sleep(candidate.OpenTimeout + 50*time.Millisecond)
	st, _ := b.Candidate()
	fmt.Fprintf(out, "after %s: candidate %s\n", candidate.OpenTimeout, st.State)
	for i := 1; i <= 2; i++ {
		err := b.Execute(ctx, func(context.Context) error { return nil })
		st, _ := b.Candidate()
		fmt.Fprintf(out, "probe %d: %-24s enforced %-6s candidate %s\n", i, outcome(err), b.State(), st.State)
	}

	st, _ = b.Candidate()
	fmt.Fprintf(out, "Side by side since the candidate was set: enforced opened %d times and refused %d calls; "+
		"the candidate opened %d time(s), was open %s and would have refused %d calls.\n",
		st.Enforced.Opens, st.Enforced.Refused, st.Opens, st.TimeOpen.Round(100*time.Millisecond), st.WouldRefuse)
	return nil
}

func outcome(err error) string {
	switch {
	case err == nil:
		return "answered"
	case errors.Is(err, breaker.ErrOpen):
		return "refused"
	}
	return "failed (" + err.Error() + ")"
}
