package redisstore

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
)

// childEnv, when set, makes the test binary a child process of TestAcrossProcesses instead
// of running tests: it holds one breaker attached to a store and obeys commands on stdin.
const childEnv = "FUSEBOX_REDISSTORE_CHILD"

type quietRedisLog struct{}

func (quietRedisLog) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	// go-redis logs every failed dial; the outage tests cause plenty on purpose.
	redis.SetLogger(quietRedisLog{})
	if os.Getenv(childEnv) != "" {
		os.Exit(child())
	}
	os.Exit(m.Run())
}

// child runs one "process": commands are "fail N", "verdict", "published"; it answers one
// line each, and exits at the end of its input.
func child() int {
	client := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer client.Close()
	s, err := New(client, WithPrefix(os.Getenv("PREFIX")), WithPollInterval(100*time.Millisecond))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer s.Close()
	p := testPolicy()
	p.MinimumThroughput, _ = strconv.Atoi(os.Getenv("MIN_THROUGHPUT"))
	b, err := s.NewBreaker("b", p)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	for !s.Healthy() {
		time.Sleep(time.Millisecond)
	}
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		switch {
		case len(f) == 2 && f[0] == "fail":
			n, _ := strconv.Atoi(f[1])
			for range n {
				_ = b.Execute(context.Background(), fail)
			}
			fmt.Println("ok")
		case len(f) == 1 && f[0] == "verdict":
			v, c := b.Verdict(), b.Counts()
			fmt.Println(v.State, encodeSince(v.Since), c.Calls, c.Failures)
		case len(f) == 1 && f[0] == "published":
			fmt.Println(s.Stats().Published)
		default:
			fmt.Println("error unknown command", f)
		}
	}
	return 0
}

// proc is a child process driven by the test.
type proc struct {
	t   *testing.T
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
	mu  sync.Mutex
}

func startProc(t *testing.T, srv *redisServer, prefix string, minThroughput int) *proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1", "REDIS_ADDR="+srv.addr, "PREFIX="+prefix,
		"MIN_THROUGHPUT="+strconv.Itoa(minThroughput),
		"GORACE=atexit_sleep_ms=0") // a -race binary otherwise lingers a second at exit
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{t: t, cmd: cmd, in: in, out: bufio.NewScanner(out)}
	t.Cleanup(func() {
		in.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	return p
}

// ready waits for the child's store to reach Redis.
func (p *proc) ready() *proc {
	if got := p.read(); got != "ready" {
		p.t.Fatalf("child: %q", got)
	}
	return p
}

func (p *proc) read() string {
	if !p.out.Scan() {
		p.t.Fatalf("child exited: %v", p.out.Err())
	}
	return p.out.Text()
}

func (p *proc) do(cmd string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintln(p.in, cmd)
	return p.read()
}

type procVerdict struct {
	state          string
	since          string
	calls, failure int64
}

func (p *proc) verdict() procVerdict {
	var v procVerdict
	if _, err := fmt.Sscan(p.do("verdict"), &v.state, &v.since, &v.calls, &v.failure); err != nil {
		p.t.Fatal(err)
	}
	return v
}

func TestAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	srv := startRedis(t)
	prefix := freeKey(t)
	procs := []*proc{startProc(t, srv, prefix, 5), startProc(t, srv, prefix, 5), startProc(t, srv, prefix, 5)}
	for _, p := range procs {
		p.ready()
	}

	// Three failures in each of two processes: no window reaches five calls.
	procs[0].do("fail 3")
	procs[1].do("fail 3")
	time.Sleep(50 * time.Millisecond)
	for i, p := range procs {
		if v := p.verdict(); v.state != breaker.Closed.String() {
			t.Fatalf("process %d: %+v, want closed: the window must not be shared", i, v)
		}
	}

	procs[0].do("fail 2") // its own window now holds 5 failures: it opens
	opened := procs[0].verdict()
	if opened.state != "open" {
		t.Fatalf("process 0 did not open: %+v", opened)
	}
	for i, p := range procs[1:] {
		took := eventually(t, shareWithin, fmt.Sprintf("process %d opens", i+1), func() bool {
			return p.verdict().state == "open"
		})
		t.Logf("process %d open after %v", i+1, took)
		v := p.verdict()
		if v.since != opened.since {
			t.Errorf("process %d open since %s, want the shared %s", i+1, v.since, opened.since)
		}
	}
	if v := procs[1].verdict(); v.calls != 3 || v.failure != 3 {
		t.Errorf("process 1 counts %+v, want its own 3 failures", v)
	}
	if v := procs[2].verdict(); v.calls != 0 {
		t.Errorf("process 2 counts %+v, want none of its own", v)
	}
}

// TestProcessesRaceOneOpenPeriod: processes that trip at the same moment produce one open
// period.
func TestProcessesRaceOneOpenPeriod(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	srv := startRedis(t)
	prefix := freeKey(t)
	const n = 8
	procs := make([]*proc, n)
	for i := range procs {
		procs[i] = startProc(t, srv, prefix, 1)
	}
	for _, p := range procs {
		p.ready()
	}
	// Every process fails one call at once.
	for _, p := range procs {
		fmt.Fprintln(p.in, "fail 1")
	}
	for _, p := range procs {
		if got := p.read(); got != "ok" {
			t.Fatalf("child: %q", got)
		}
	}
	var got map[string]string
	eventually(t, patience, "a verdict is stored", func() bool {
		// The children name no application: the default one, the same for every
		// process of one program.
		got = stored(t, srv.Client(), prefix+DefaultApplication()+":b")
		return got["state"] != ""
	})
	if got["epoch"] != "1" || got["state"] != "open" {
		t.Fatalf("stored %v, want one open period", got)
	}
	eventually(t, patience, "every process in the stored open period", func() bool {
		for _, p := range procs {
			if v := p.verdict(); v.state != "open" || v.since != got["since"] {
				return false
			}
		}
		return true
	})
	published := 0
	for _, p := range procs {
		n, _ := strconv.Atoi(p.do("published"))
		published += n
	}
	if published != 1 {
		t.Errorf("%d processes published, want 1", published)
	}
}
