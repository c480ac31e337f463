package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestRunAlone runs the example without Redis: each gateway judges only its own charges,
// so checkout-2 still calls the failing provider after checkout-1 has opened its circuit;
// no order fails, and every pending payment is charged in the end.
func TestRunAlone(t *testing.T) {
	out := runExample(t, "")
	inOrder(t, out,
		"Each gateway decides alone",
		"order 1 (€11.50) at checkout-1: paid (ch_1)",
		"order 5 (€17.50) at checkout-1: payment pending (the provider answered 503 Service Unavailable)",
		"checkout-1: circuit closed → open: 2 of its last 4 charges failed",
		"An order comes to checkout-2.",
		"order 7 (€20.50) at checkout-2: payment pending (the provider answered 503 Service Unavailable)",
		"the provider received 1 request(s) for it",
		"provider not called: the circuit is open",
		"checkout-1: circuit open → half_open",
		"checkout-1: circuit half_open → closed: 2 probes in a row succeeded",
		"Later, the pending payments are processed.",
		"order 5 (€17.50) at checkout-1: paid",
	)
	if strings.Contains(out, "checkout-2: circuit") {
		t.Errorf("checkout-2's circuit moved, but it saw one failure of three charges and shares nothing:\n%s", out)
	}
	allPaid(t, out)
}

// TestNarrationOrder checks, on the run without Redis, that each transition is printed
// after the order that caused it, and a transition to half-open before the probe it lets
// through: the second failed charge comes before "2 of its last 4 charges failed".
func TestNarrationOrder(t *testing.T) {
	out := runExample(t, "")
	lines := strings.Split(out, "\n")
	const failed = "at checkout-1: payment pending (the provider answered 503 Service Unavailable)"
	opened := find(t, lines, "checkout-1: circuit closed → open: 2 of its last 4 charges failed")
	n := 0
	for _, l := range lines[:opened] {
		if strings.HasSuffix(l, failed) {
			n++
		}
	}
	if n != 2 {
		t.Errorf("%d failed charges at checkout-1 printed before its circuit opened on 2 failures", n)
	}
	if !strings.HasSuffix(lines[opened-1], failed) {
		t.Errorf("the line before the circuit opened is %q, want a failed charge", lines[opened-1])
	}
	halfOpen := find(t, lines, "checkout-1: circuit open → half_open")
	if !strings.Contains(lines[halfOpen+1], "at checkout-1: paid") {
		t.Errorf("the line after checkout-1 went half-open is %q, want its probe, paid", lines[halfOpen+1])
	}
	closed := find(t, lines, "checkout-1: circuit half_open → closed: 2 probes in a row succeeded")
	var probes []string
	for _, l := range lines[halfOpen+1 : closed] {
		if strings.Contains(l, "at checkout-1:") {
			probes = append(probes, l)
		}
	}
	if len(probes) != 2 || !strings.Contains(lines[closed-1], "at checkout-1: paid") {
		t.Errorf("between half-open and closed checkout-1 printed %q, want its 2 probes, paid, the last just before", probes)
	}
}

// find returns the index of the first line that contains s.
func find(t *testing.T, lines []string, s string) int {
	t.Helper()
	for i, l := range lines {
		if strings.Contains(l, s) {
			return i
		}
	}
	t.Fatalf("no line contains %q:\n%s", s, strings.Join(lines, "\n"))
	return -1
}

// TestRunWithRedis runs the example against a redis-server of its own: checkout-2 adopts
// the open verdict checkout-1 reached, and takes its order as pending without calling the
// provider.
func TestRunWithRedis(t *testing.T) {
	addr := startRedis(t)
	out := runExample(t, addr)
	inOrder(t, out,
		"The gateways share their verdict through Redis at "+addr,
		"checkout-1: circuit closed → open: 2 of its last 4 charges failed",
		"An order comes to checkout-2.",
		"order 7 (€20.50) at checkout-2: payment pending (provider not called: the circuit is open)",
		"the provider received 0 request(s) for it",
		"The payment provider is back.",
		"Later, the pending payments are processed.",
		"order 7 (€20.50) at checkout-2: paid",
	)
	// Printed by the store's goroutine, so not necessarily before "An order comes".
	if !strings.Contains(out, "checkout-2: circuit closed → open: another instance's verdict, through Redis") {
		t.Errorf("checkout-2 did not adopt checkout-1's open verdict:\n%s", out)
	}
	allPaid(t, out)
}

func runExample(t *testing.T, redisAddr string) string {
	t.Helper()
	var out bytes.Buffer
	if err := run(context.Background(), &out, redisAddr); err != nil {
		t.Fatalf("run: %v\n%s", err, &out)
	}
	t.Logf("output:\n%s", &out)
	return out.String()
}

// allPaid checks the summary: every order paid in the end, none failed.
func allPaid(t *testing.T, out string) {
	t.Helper()
	m := regexp.MustCompile(`(\d+) orders: (\d+) paid, 0 pending, none failed\.`).FindStringSubmatch(out)
	if m == nil || m[1] != m[2] {
		t.Errorf("not every order was paid in the end:\n%s", out)
	}
}

// startRedis starts a redis-server of the test's own on a free loopback port, with nothing
// persisted, and returns its address. Without the binary the test fails under CI (which
// installs it) and is skipped, saying why, elsewhere.
func startRedis(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		msg := "redis-server not found on PATH (Debian package redis-server): sharing the verdict needs a real Redis"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip("SKIPPED: " + msg)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, port, _ := net.SplitHostPort(addr)
	var log bytes.Buffer
	cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--dir", t.TempDir(),
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning")
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); ; {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s did not answer: %v\n%s", addr, err, &log)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// inOrder fails t unless each of want appears in out after the one before it.
func inOrder(t *testing.T, out string, want ...string) {
	t.Helper()
	rest := out
	for _, w := range want {
		i := strings.Index(rest, w)
		if i < 0 {
			t.Fatalf("output lacks %q after what came before it:\n%s", w, out)
		}
		rest = rest[i+len(w):]
	}
}
