// Package testutil holds the helpers the operator module's tests share: waiting
// for a condition the system reaches in its own time, a buffer a running command
// writes while the test reads it, and a record of the API server's warnings.
//
// It belongs to the root module, so the library's modules (pkg/breaker and its
// adapters) cannot import it: they would have to require the operator's module,
// Kubernetes and all, for a test. Their tests keep their own few lines.
package testutil

import (
	"bytes"
	"sync"
	"testing"
	"time"
)

// pollEvery is how often Eventually asks again: often enough that a wait
// costs little beyond the time the system takes, rarely enough that polling
// an API server does not load it.
const pollEvery = 50 * time.Millisecond

// Eventually calls cond until it returns nil, and fails the test with what
// and cond's last error once timeout has passed. Waits are bounded generously:
// the test machines are shared and loaded, and a wait that returns early
// costs nothing.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v", what, timeout, err)
		}
		time.Sleep(pollEvery)
	}
}

// SyncBuffer is an io.Writer that one goroutine (a command under test) writes
// while another (the test) reads it. The zero value is ready to use.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p; it never fails.
func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String is everything written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Warnings records the warnings (HTTP 299) the API server returns to a client: make it
// the WarningHandler of the client's rest.Config. Safe for concurrent use.
type Warnings struct {
	mu   sync.Mutex
	msgs []string // guarded by mu
}

// HandleWarningHeader implements client-go's rest.WarningHandler.
func (w *Warnings) HandleWarningHeader(code int, _, text string) {
	if code != 299 || text == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, text)
}

// Take returns the warnings so far and forgets them.
func (w *Warnings) Take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	msgs := w.msgs
	w.msgs = nil
	return msgs
}
