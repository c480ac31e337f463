// Package narrate tells the story of the examples' circuits: each transition as a line,
// printed where it belongs among the lines the example prints of its calls. The examples
// (three-states, http-api, payment-gateway) share it so that they tell it alike.
//
// The breaker makes the transition a call's outcome causes when it records the outcome:
// before breaker.Call or the transport returns, and so before the example has printed what
// the call got. Printed at once, "circuit closed → open: 4 of the last 8 calls failed"
// would come before the fourth failure; such a line waits until the example says the call
// is over (CallOver). A transition to half-open happens as a call is let through, before it
// runs, and a verdict adopted from elsewhere is no call's doing: both are printed at once.
package narrate

import (
	"fmt"
	"io"
	"sync"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/observe"
)

// Narrator prints the transitions of the circuits it observes to its writer. It is safe
// for concurrent use.
type Narrator struct {
	mu      sync.Mutex
	out     io.Writer
	pending []string // guarded by mu: lines waiting for their call to be over
}

// New returns a Narrator that prints to out.
func New(out io.Writer) *Narrator { return &Narrator{out: out} }

// Circuit says how the story names one circuit's transitions.
type Circuit struct {
	// Prefix goes before "circuit" on each line ("checkout-1: "); empty for a story of
	// one circuit.
	Prefix string
	// Failed says what the failures that opened the circuit were counted out of, a format
	// taking the failures and the calls: "%d of the last %d calls failed".
	Failed string
	// Adopted says where an adopted verdict came from ("another instance's verdict,
	// through Redis").
	Adopted string
	// Seen, if set, is told of each transition after its line is printed or held.
	Seen func(observe.Transition)
}

// Observer returns the observer that tells c's transitions, for breaker.WithObserver.
func (n *Narrator) Observer(c Circuit) observe.Observer { return teller{n, c} }

type teller struct {
	n *Narrator
	c Circuit
}

func (t teller) OnTransition(tr observe.Transition) {
	why := ""
	switch {
	case tr.Reason == breakerconfig.ReasonAdopted:
		why = ": " + t.c.Adopted
	case tr.To == breaker.Open && tr.From == breaker.Closed:
		why = ": " + fmt.Sprintf(t.c.Failed, tr.Counts.Failures, tr.Counts.Calls)
	case tr.To == breaker.Open:
		why = ": the probe failed"
	case tr.To == breaker.HalfOpen:
		why = ": the open period is over, a probe may go through"
	case tr.To == breaker.Closed:
		why = fmt.Sprintf(": %d probes in a row succeeded", tr.Counts.Successes)
	}
	line := fmt.Sprintf("%scircuit %s → %s%s\n", t.c.Prefix, tr.From, tr.To, why)
	t.n.mu.Lock()
	t.n.pending = append(t.n.pending, line)
	if tr.To == breaker.HalfOpen || tr.Reason == breakerconfig.ReasonAdopted {
		t.n.flushLocked()
	}
	t.n.mu.Unlock()
	if t.c.Seen != nil {
		t.c.Seen(tr)
	}
}

// CallOver prints the transitions the call that just ended caused.
func (n *Narrator) CallOver() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.flushLocked()
}

func (n *Narrator) flushLocked() {
	for _, line := range n.pending {
		_, _ = io.WriteString(n.out, line)
	}
	n.pending = n.pending[:0]
}
