package localcluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// claimFile is the name of the file, beside the kubeconfig, that a local run holds a lock
// on for as long as it runs, and that says which run it is.
const claimFile = "localcluster.lock"

// Claim is a local run's hold on its directory (the one its kubeconfig and manager log
// go to): one run per directory, so that a second cannot overwrite the kubeconfig of the
// first, which still runs, with the address of its own, which is about to fail.
//
// The hold is an flock(2) lock on localcluster.lock, which the kernel releases however
// the run ends (a crash, a kill -9), so a stale file never blocks the next run.
type Claim struct {
	f *os.File
}

// Running is the error of a claim on a directory another run holds.
type Running struct {
	// PID is the running one's process, Since when it started, Kubeconfig the path of the
	// kubeconfig that reaches it; each zero if it did not say (yet).
	PID        int
	Since      time.Time
	Kubeconfig string
}

func (r *Running) Error() string {
	var who []string
	if r.PID != 0 {
		who = append(who, "pid "+strconv.Itoa(r.PID))
	}
	if !r.Since.IsZero() {
		who = append(who, "up since "+r.Since.Local().Format(time.TimeOnly))
	}
	msg := "Fusebox already runs here"
	if len(who) > 0 {
		msg += " (" + strings.Join(who, ", ") + ")"
	}
	if r.Kubeconfig != "" {
		msg += "; use it: export KUBECONFIG=" + r.Kubeconfig
	}
	return msg + "; or stop it first (Ctrl-C in its terminal)"
}

// ClaimDir takes dir for this process, whose kubeconfig will be kubeconfig, or returns a
// *Running that says who has it. It writes nothing else in dir.
func ClaimDir(dir, kubeconfig string) (*Claim, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, claimFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, readRunning(f)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	abs, err := filepath.Abs(kubeconfig)
	if err != nil {
		abs = kubeconfig
	}
	say := fmt.Sprintf("pid %d\nsince %s\nkubeconfig %s\n", os.Getpid(), time.Now().UTC().Format(time.RFC3339), abs)
	err = f.Truncate(0)
	if err == nil {
		_, err = f.WriteAt([]byte(say), 0)
	}
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	return &Claim{f: f}, nil
}

// readRunning reads what the holder of f's lock wrote of itself.
func readRunning(f *os.File) error {
	r := &Running{}
	raw, err := os.ReadFile(f.Name())
	if err != nil {
		return r
	}
	for _, line := range strings.Split(string(raw), "\n") {
		key, value, _ := strings.Cut(line, " ")
		switch key {
		case "pid":
			r.PID, _ = strconv.Atoi(value)
		case "since":
			r.Since, _ = time.Parse(time.RFC3339, value)
		case "kubeconfig":
			r.Kubeconfig = value
		}
	}
	return r
}

// Release lets the directory go; the next run may claim it.
func (c *Claim) Release() error {
	return c.f.Close()
}
