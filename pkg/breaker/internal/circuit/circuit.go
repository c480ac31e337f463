package circuit

import "fmt"

// State is the state of a circuit.
type State int32

// The three states of a circuit. The zero value is Closed.
const (
	Closed State = iota
	Open
	HalfOpen
)

// String returns "closed", "open" or "half_open", the spelling used in telemetry.
func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case HalfOpen:
		return "half_open"
	}
	return fmt.Sprintf("State(%d)", int32(s))
}

// Counts are a breaker's tallies. Closed or open, Calls, Failures and Slow are the window's
// totals (while open, the tally that opened it, frozen) and Successes is 0. Half-open, Calls
// is the probes completed in this half-open period, Successes the consecutive probe
// successes, and Failures and Slow 0, since a failed or slow probe re-opens the circuit.
// Slow counts calls that took at least Policy.SlowCallDuration, whatever their outcome, and
// stays 0 without it.
type Counts struct {
	Calls     int64
	Failures  int64
	Successes int64
	Slow      int64
}
