package fuseboxd

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// socketLock is the lock on PATH.lock that makes a socket path one daemon's.
type socketLock struct {
	f *os.File
}

// lockSocket takes the lock of the socket at path, or returns an *InUseError naming the
// daemon that holds it.
func lockSocket(path string) (*socketLock, error) {
	name := path + ".lock"
	for {
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, fmt.Errorf("fuseboxd: lock %s: %w", path, err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			pid := pidIn(f)
			_ = f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, &InUseError{Path: path, PID: pid}
			}
			return nil, fmt.Errorf("fuseboxd: lock %s: %w", path, err)
		}
		// The daemon that held it may have removed the file between our open and our
		// lock: then this lock is on a file nobody else finds, and we start again.
		held, err1 := f.Stat()
		named, err2 := os.Stat(name)
		if err1 == nil && err2 == nil && os.SameFile(held, named) {
			// The pid, for the refusal a second daemon prints.
			if f.Truncate(0) == nil {
				_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
			}
			return &socketLock{f: f}, nil
		}
		_ = f.Close()
	}
}

// release removes the lock file and lets the lock go.
func (l *socketLock) release() {
	_ = os.Remove(l.f.Name())
	_ = l.f.Close()
}

// pidIn is the pid a lock file holds, or 0.
func pidIn(f *os.File) int {
	buf := make([]byte, 16)
	n, _ := f.ReadAt(buf, 0)
	pid, err := strconv.Atoi(strings.TrimSpace(string(buf[:n])))
	if err != nil {
		return 0
	}
	return pid
}
