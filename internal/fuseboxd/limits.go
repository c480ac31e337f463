package fuseboxd

import (
	"log/slog"
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
)

// warnings logs that a cap was reached, each kind at most once a minute: a client at its
// cap is refused on every acquire, and the log must say so without flooding.
type warnings struct {
	last [tableClosed]atomic.Int64 // by shortage, unix nanoseconds
}

func (w *warnings) warn(kind shortage, log *slog.Logger, msg string, args ...any) {
	now := time.Now().UnixNano()
	last := w.last[kind-1].Load()
	if now-last < int64(time.Minute) || !w.last[kind-1].CompareAndSwap(last, now) {
		return
	}
	log.Warn(msg, args...)
}
