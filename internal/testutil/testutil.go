// Package testutil holds the helpers the operator module's tests share: waiting
// for a condition the system reaches in its own time, a buffer a running command
// writes while the test reads it, a record of the API server's warnings, and how many
// of a suite's parallel tests may wait at once.
//
// It belongs to the root module, so the library's modules (pkg/breaker and its
// adapters) cannot import it: they would have to require the operator's module,
// Kubernetes and all, for a test. Their tests keep their own few lines, and say so.
package testutil

import (
	"bytes"
	"errors"
	"flag"
	"strconv"
	"sync"
	"testing"
	"time"
)

// pollEvery is how often Eventually asks again: often enough that a wait
// costs little beyond the time the system takes, rarely enough that polling
// an API server does not load it.
const pollEvery = 50 * time.Millisecond

// Condition is what Eventually waits for: a func() error, which holds when it returns nil
// and otherwise says why not, or a func() bool.
type Condition interface{ func() error | func() bool }

// Eventually calls cond until it holds, and fails the test with what (and, for a
// func() error, cond's last error) once timeout has passed. Waits are bounded
// generously: the test machines are shared and loaded, and a wait that returns early
// costs nothing.
func Eventually[C Condition](t testing.TB, timeout time.Duration, what string, cond C) {
	t.Helper()
	EventuallyEvery(t, timeout, pollEvery, what, cond)
}

// EventuallyEvery is Eventually asking every interval, and returns how long cond took
// to hold: for a wait that is a measurement (how soon a verdict reaches every pod),
// whose figure is only as fine as its polling.
func EventuallyEvery[C Condition](t testing.TB, timeout, every time.Duration, what string, cond C) time.Duration {
	t.Helper()
	check := func() error {
		switch c := any(cond).(type) {
		case func() error:
			return c()
		case func() bool:
			if !c() {
				return errNotYet
			}
		}
		return nil
	}
	start := time.Now()
	for {
		err := check()
		if err == nil {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Fatalf("%s: not within %s: %v", what, timeout, err)
		}
		time.Sleep(every)
	}
}

// errNotYet is a func() bool condition's error: it says nothing more.
var errNotYet = errors.New("the condition does not hold")

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

// WaitingParallelism lets up to n of a package's parallel tests run at once, unless
// -test.parallel was given. It is for suites whose tests spend their time waiting on an
// API server, a process or a timer rather than on the CPU: go test's default,
// GOMAXPROCS (two on the machines the project tests on), suits tests that compute, and
// left such a suite's waits to run two at a time. Call it from TestMain, before m.Run.
func WaitingParallelism(n int) {
	if !flag.Parsed() {
		flag.Parse()
	}
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		if err := flag.Set("test.parallel", strconv.Itoa(n)); err != nil {
			panic(err) // only if the testing package's flags are not registered: not a test binary
		}
	}
}
