package redisstore

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisServer is a redis-server of the test's own, on a free loopback port, with nothing
// persisted: no test ever touches a Redis it did not start.
type redisServer struct {
	t    testing.TB
	bin  string
	dir  string
	addr string

	mu  sync.Mutex
	cmd *exec.Cmd
	log *bytes.Buffer
}

// startRedis starts a redis-server for t and stops it when t ends. Without the binary the
// test fails under CI (which installs it) and is skipped, loudly, elsewhere.
func startRedis(t testing.TB) *redisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		msg := "redis-server not found on PATH (Debian package redis-server); the shared-verdict tests need a real Redis"
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
	s := &redisServer{t: t, bin: bin, dir: t.TempDir(), addr: addr}
	s.Start()
	t.Cleanup(s.Kill)
	return s
}

// Start runs the server (again, after Kill) on the same port and waits until it answers.
func (s *redisServer) Start() {
	s.t.Helper()
	_, port, _ := net.SplitHostPort(s.addr)
	cmd := exec.Command(s.bin,
		"--port", port, "--bind", "127.0.0.1", "--dir", s.dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning")
	log := new(bytes.Buffer)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start redis-server: %v", err)
	}
	s.mu.Lock()
	s.cmd, s.log = cmd, log
	s.mu.Unlock()

	c := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(time.Minute) // a loaded machine is slow to start one
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redis-server on %s did not answer: %v\n%s", s.addr, err, log)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Kill stops the server at once (SIGKILL), as a crash would.
func (s *redisServer) Kill() {
	s.mu.Lock()
	cmd := s.cmd
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
}

// Client returns a client for the server, closed when the test ends, its timeouts
// clientTimeout's: a killed server refuses or resets its connections at once, so a test
// against one fails fast however long they are.
func (s *redisServer) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr:         s.addr,
		DialTimeout:  clientTimeout,
		ReadTimeout:  clientTimeout,
		WriteTimeout: clientTimeout,
		MaxRetries:   -1,
		PoolSize:     4,
	})
	s.t.Cleanup(func() { c.Close() })
	return c
}

func (s *redisServer) String() string { return "redis-server " + s.addr }

// freeKey returns a key prefix no other test in this run uses.
func freeKey(t testing.TB) string {
	return fmt.Sprintf("test:%s:%s:", t.Name(), strconv.FormatInt(time.Now().UnixNano(), 36))
}
