package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"time"
)

// progressEvery is how often a cross-compilation says how far along it is: the first
// build of an image compiles the manager's dependencies twice (one per platform), which
// takes minutes on two cores, and go build says nothing until it is done.
const progressEvery = 15 * time.Second

// buildProgress counts the packages `go build -v` names on stderr as it compiles them,
// and prints the count every progressEvery.
type buildProgress struct {
	label string
	total int
	start time.Time

	mu       sync.Mutex
	stderr   bytes.Buffer // everything, for the error message
	line     []byte
	compiled int
}

// startProgress lists the packages of the build (the same go command, directory and
// environment as cmd, with -deps) and returns the writer for cmd's stderr and a function
// that stops the printing.
func startProgress(ctx context.Context, cmd *exec.Cmd, label, pkg string) (*buildProgress, func()) {
	p := &buildProgress{label: label, start: time.Now()}
	list := exec.CommandContext(ctx, "go", "list", "-deps", pkg)
	list.Dir, list.Env = cmd.Dir, cmd.Env
	if out, err := list.Output(); err == nil {
		p.total = bytes.Count(out, []byte("\n"))
	}
	fmt.Fprintf(os.Stderr, "image: %s: compiling %d packages (those in the build cache are skipped)\n", label, p.total)
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				p.mu.Lock()
				n := p.compiled
				p.mu.Unlock()
				fmt.Fprintf(os.Stderr, "image: %s: %d of %d packages compiled, %s\n", label, n, p.total, time.Since(p.start).Round(time.Second))
			}
		}
	}()
	return p, func() {
		close(done)
		fmt.Fprintf(os.Stderr, "image: %s: compiled in %s (%d of %d packages, the rest from the build cache)\n",
			label, time.Since(p.start).Round(time.Second), p.compiled, p.total)
	}
}

// Write counts the lines that name a package; "go: ..." lines are the go command's own.
func (p *buildProgress) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stderr.Write(b)
	for _, c := range b {
		if c != '\n' {
			p.line = append(p.line, c)
			continue
		}
		if len(p.line) > 0 && !bytes.HasPrefix(p.line, []byte("go: ")) {
			p.compiled++
		}
		p.line = p.line[:0]
	}
	return len(b), nil
}

func (p *buildProgress) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}
