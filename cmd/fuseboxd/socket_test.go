package main

import (
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestASecondDaemonIsRefused (docs/rbac.md, attack "a second daemon"): a second
// fuseboxd on the socket of a live one refuses to start, with one line naming the
// running one, and leaves its socket alone, so the first serves on; a socket left by a
// daemon that was killed is replaced.
func TestASecondDaemonIsRefused(t *testing.T) {
	first := startBinary(t, map[string]string{"payments": paymentsConfig})
	before, err := os.Lstat(first.sock)
	if err != nil {
		t.Fatal(err)
	}

	// Bounded, for the daemon that does start (and would serve until stopped).
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	second := exec.CommandContext(ctx, fuseboxdBin, "serve", "--socket", first.sock, "--config-dir", first.dir)
	out, err := second.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("the second daemon ran on the live socket until killed:\n%s", out)
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("the second daemon: %v, want exit status 1\n%s", err, out)
	}
	want := "fuseboxd: another fuseboxd (pid " + strconv.Itoa(first.cmd.Process.Pid) + ") is serving " + first.sock
	if lines := strings.Split(strings.TrimSpace(string(out)), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], want) {
		t.Fatalf("the second daemon said:\n%s\nwant one line starting %q", out, want)
	}

	after, err := os.Lstat(first.sock)
	if err != nil || !os.SameFile(before, after) {
		t.Fatalf("the first daemon's socket after the second exited: %v, %v; want the same file", after, err)
	}
	first.client.CloseIdleConnections() // a new connection: the socket itself still answers
	if code, m := first.post(t, "/v1/breakers/payments/permits", ""); code != http.StatusCreated {
		t.Fatalf("the first daemon after the second was refused: %d %v, want 201", code, m)
	}

	// Killed, it leaves its socket behind; the next daemon on the path replaces it.
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-first.exited
	if fi, err := os.Lstat(first.sock); err != nil || fi.Mode().Type() != os.ModeSocket {
		t.Fatalf("a killed daemon's socket: %v %v, want it left behind", fi, err)
	}
	next := startBinaryOn(t, first.sock, map[string]string{"payments": paymentsConfig})
	if code, m := next.post(t, "/v1/breakers/payments/permits", ""); code != http.StatusCreated {
		t.Fatalf("the daemon that replaced a stale socket: %d %v, want 201", code, m)
	}
}
