package testutil

import (
	"errors"
	"flag"
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

// A func() bool condition is waited for alike, at the interval asked for, and the wait
// is returned: what the benchmarks of propagation measure.
func TestEventuallyEveryTakesABoolAndTimesTheWait(t *testing.T) {
	calls := 0
	waited := EventuallyEvery(t, 10*time.Second, time.Millisecond, "the fifth call", func() bool {
		calls++
		return calls == 5
	})
	if calls != 5 || waited < 4*time.Millisecond {
		t.Errorf("%d calls in %v, want 5 calls at least a millisecond apart", calls, waited)
	}

	r := &recorder{TB: t}
	func() {
		defer func() { _ = recover() }()
		EventuallyEvery(r, 3*time.Millisecond, time.Millisecond, "never", func() bool { return false })
	}()
	if !strings.HasPrefix(r.msg, "never: not within 3ms: the condition does not hold") {
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

func TestWaitingParallelism(t *testing.T) {
	f := flag.Lookup("test.parallel")
	before := f.Value.String()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	t.Cleanup(func() { _ = f.Value.Set(before) })

	WaitingParallelism(7)
	switch got := f.Value.String(); {
	case given && got != before:
		t.Errorf("-test.parallel=%s was given; WaitingParallelism(7) made it %s", before, got)
	case !given && got != "7":
		t.Errorf("-test.parallel not given: %s after WaitingParallelism(7), want 7", got)
	}
}
