package fuseboxd

import (
	"sync/atomic"
	"time"
)

// Limits of the API (docs/design.md §8, docs/fuseboxd.md "Limits").
const (
	// MaxLease is the longest lease a permit can have, whatever the client asks.
	MaxLease = 10 * time.Minute
	// MaxBody is the largest request body accepted; a larger one gets 413.
	MaxBody = 64 << 10
	// DefaultMaxPermits bounds the permits outstanding at once: with every client
	// leaking, memory stays at about this many permits (a few hundred bytes each).
	DefaultMaxPermits = 1 << 16
	// DefaultMaxPermitsPerClient bounds the permits one client holds: a sixteenth of the
	// table, so that one leaking worker leaves the others their permits, and far above
	// what a worker has in flight (one call at a time in PHP, a few hundred in an
	// event loop).
	DefaultMaxPermitsPerClient = DefaultMaxPermits / 16
	// DefaultMaxBreakers bounds the breakers a client can create by naming them: a name
	// nobody published gets the default policy, but a client looping over random names
	// must not grow the registry without end.
	DefaultMaxBreakers = 1024
	// DefaultMaxConnections bounds the connections served at once: a worker keeps one,
	// and a pool of PHP workers is rarely more than a few hundred.
	DefaultMaxConnections = 512
	// DefaultRequestTimeout is how long a request may take to arrive, header and body,
	// from its first byte, and its answer to be written: a client in the pod sends a
	// request of a few hundred bytes in one write, in microseconds.
	DefaultRequestTimeout = 5 * time.Second
	// MaxLimitWait is the longest an acquire waits for a slot of a concurrency limit that
	// net/http leaves room for in its write deadline: spec.concurrency.maxWait's bound. The
	// hand-written server gives every answer its own write deadline whatever the wait.
	MaxLimitWait = 10 * time.Second
	// DefaultIdleTimeout closes a connection no request has begun on for so long: a
	// worker that comes back later opens another (curl does so by itself).
	DefaultIdleTimeout = 2 * time.Minute
	// maxHeaderBytes bounds a request's header on net/http (the wire's is its buffer),
	// so that a connection costs at most that and MaxBody.
	maxHeaderBytes = 16 << 10
)

// warnings spaces the log lines saying a cap was reached, each kind at most once a
// minute: a client at its cap is refused on every acquire, and the log must say so
// without flooding.
type warnings struct {
	last [connectionsAtCap]atomic.Int64 // by shortage, unix nanoseconds
}

// due reports whether a line about kind is to be logged now.
func (w *warnings) due(kind shortage) bool {
	now := time.Now().UnixNano()
	last := w.last[kind-1].Load()
	return now-last >= int64(time.Minute) && w.last[kind-1].CompareAndSwap(last, now)
}
