package testutil

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestEventuallyWaitsForTheCondition(t *testing.T) {
	calls := 0
	start := time.Now()
	Eventually(t, 10*time.Second, "the third call", func() error {
		calls++
		if calls < 3 {
			return fmt.Errorf("call %d", calls)
		}
		return nil
	})
	if calls != 3 {
		t.Errorf("%d calls, want 3", calls)
	}
	if waited := time.Since(start); waited < 2*pollEvery {
		t.Errorf("returned after %v: want two polls between three calls", waited)
	}
}

// recorder is a testing.TB whose Fatalf records the message and ends the
// goroutine, as the real one does.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	panic(r)
}

func TestEventuallyFailsWithTheLastError(t *testing.T) {
	r := &recorder{TB: t}
	func() {
		defer func() {
			if p := recover(); p != r {
				t.Fatalf("Eventually returned (recovered %v), want it to fail the test", p)
			}
		}()
		Eventually(r, 3*pollEvery, "the impossible", func() error { return errors.New("still no") })
	}()
	if !strings.HasPrefix(r.msg, "the impossible: not within 150ms: still no") {
		t.Errorf("message %q", r.msg)
	}
}

func TestSyncBufferUnderConcurrentWrites(t *testing.T) {
	var b SyncBuffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				_, _ = io.WriteString(&b, "x")
				_ = b.String()
			}
		}()
	}
	wg.Wait()
	if n := len(b.String()); n != 800 {
		t.Errorf("%d bytes, want 800", n)
	}
}
