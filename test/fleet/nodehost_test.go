package fleet

import (
	"errors"
	"fmt"
	"io"
	"net/rpc"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

// Node hosts. A process may hold at most 20,000 open files on this machine (the hard
// limit, which no process here may raise), and a pod wired to its node's agent holds two
// loopback connections to it (its config stream, its report), four descriptors when
// both ends are in one process: 5,000 pods and their agents would not fit in the
// harness's process, nor 20,000 in any one. So with FLEET_NODES the nodes are spread
// over node host processes, each this test binary run again with nodeHostEnv set, each
// holding whole nodes (their agents and the pods bound to them, as a machine would), at
// most hostPods pods by default (FLEET_NODE_HOSTS sets their number). The harness drives
// each one's Host over net/rpc on a pair of pipes.
//
// Hollow nodes (FLEET_HOLLOW) hold no connection but their agent's API client, so what
// bounds a hollow host is CPU, not descriptors (hollowHostPods).

// nodeHostEnv, set in a process's environment, makes this test binary a node host
// instead of running tests; its value names the host in its log. nodeHostHollowEnv makes
// it a host of hollow nodes (HollowHost).
const (
	nodeHostEnv       = "FLEET_NODE_HOST"
	nodeHostConfigEnv = "FLEET_NODE_HOST_KUBECONFIG"
	nodeHostHollowEnv = "FLEET_NODE_HOST_HOLLOW"
	hostPods          = 2000
)

// defaultNodeHosts is how many node host processes a run of s starts when
// FLEET_NODE_HOSTS does not say.
func defaultNodeHosts(s settings) int {
	if s.hollow {
		return hollowHosts(s.pods, runtime.NumCPU())
	}
	return (s.pods + hostPods - 1) / hostPods
}

func TestMain(m *testing.M) {
	if name := os.Getenv(nodeHostEnv); name != "" {
		os.Exit(serveNodeHost(name))
	}
	os.Exit(m.Run())
}

// serveNodeHost serves a Host on file descriptors 3 (calls in) and 4 (answers out) until
// the harness closes them, then stops everything it runs.
func serveNodeHost(name string) int {
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv(nodeHostConfigEnv))
	if err != nil {
		fmt.Fprintf(os.Stderr, "fleet node host %s: %v\n", name, err)
		return 1
	}
	var h interface{ Stop(Empty, *Empty) error }
	if os.Getenv(nodeHostHollowEnv) != "" {
		h = newHollowHost(cfg, name)
	} else {
		h = newHost(cfg)
	}
	srv := rpc.NewServer()
	if err := srv.RegisterName("Host", h); err != nil {
		fmt.Fprintf(os.Stderr, "fleet node host %s: %v\n", name, err)
		return 1
	}
	srv.ServeConn(pipes{os.NewFile(3, "calls"), os.NewFile(4, "answers")})
	_ = h.Stop(Empty{}, &Empty{})
	return 0
}

// pipes is a read pipe and a write pipe as one connection.
type pipes struct {
	r *os.File
	w *os.File
}

func (p pipes) Read(b []byte) (int, error)  { return p.r.Read(b) }
func (p pipes) Write(b []byte) (int, error) { return p.w.Write(b) }
func (p pipes) Close() error                { return errors.Join(p.r.Close(), p.w.Close()) }

var _ io.ReadWriteCloser = pipes{}

// podHost is a Host as the harness calls it: in its own process, or in a node host.
type podHost interface {
	call(method string, args, reply any) error
	pid() int // the process whose CPU it spends
	close()   // stops it and what it runs
	String() string
}

// localHost is the Host in the harness's own process (the per-pod mode).
type localHost struct{ h *Host }

func (l localHost) call(method string, args, reply any) error {
	switch method {
	case "StartPods":
		return l.h.StartPods(args.(StartPodsArgs), reply.(*time.Duration))
	case "Use":
		return l.h.Use(args.([]string), reply.(*Empty))
	case "Trip":
		return l.h.Trip(args.(TripArgs), reply.(*int64))
	case "Wait":
		return l.h.Wait(args.(WaitArgs), reply.(*WaitReply))
	case "WaitPolicy":
		return l.h.WaitPolicy(args.(PolicyArgs), reply.(*PolicyReply))
	case "Recover":
		return l.h.Recover(args.(RecoverArgs), reply.(*int))
	case "Stats":
		return l.h.Stats(args.(Empty), reply.(*HostStats))
	case "Stop":
		return l.h.Stop(args.(Empty), reply.(*Empty))
	}
	return fmt.Errorf("the in-process host has no method %s", method)
}

func (l localHost) pid() int       { return os.Getpid() }
func (l localHost) close()         { _ = l.h.Stop(Empty{}, &Empty{}) }
func (l localHost) String() string { return "this process" }

// nodeHost is a node host process.
type nodeHost struct {
	name   string
	cmd    *exec.Cmd
	client *rpc.Client
	exited chan struct{}
}

// startNodeHost runs this test binary again as node host name, of hollow nodes if
// hollow, reaching the API server through the administrator's kubeconfig (every client
// it makes impersonates).
func startNodeHost(name, kubeconfig string, hollow bool) (*nodeHost, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	callsR, callsW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	answersR, answersW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), nodeHostEnv+"="+name, nodeHostConfigEnv+"="+kubeconfig)
	if hollow {
		cmd.Env = append(cmd.Env, nodeHostHollowEnv+"=1")
	}
	cmd.ExtraFiles = []*os.File{callsR, answersW}
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	// A harness that dies takes its hosts with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start node host %s: %w", name, err)
	}
	_ = callsR.Close()
	_ = answersW.Close()
	n := &nodeHost{name: name, cmd: cmd, client: rpc.NewClient(pipes{answersR, callsW}), exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(n.exited)
	}()
	return n, nil
}

func (n *nodeHost) call(method string, args, reply any) error {
	if err := n.client.Call("Host."+method, args, reply); err != nil {
		return fmt.Errorf("node host %s: %s: %w", n.name, method, err)
	}
	return nil
}

func (n *nodeHost) pid() int { return n.cmd.Process.Pid }
func (n *nodeHost) String() string {
	return "node host " + n.name + " (pid " + strconv.Itoa(n.pid()) + ")"
}

// close stops what the host runs, then the process: closing its pipes ends it, and it is
// killed if it has not ended 40 s later.
func (n *nodeHost) close() {
	_ = n.call("Stop", Empty{}, &Empty{})
	_ = n.client.Close()
	select {
	case <-n.exited:
	case <-time.After(40 * time.Second):
		_ = n.cmd.Process.Kill()
		<-n.exited
	}
}

// fleet is every host of the run.
type fleet []podHost

// each calls method on every host at once, each with the args args(i) gives, and
// reply(i) to answer into; it returns the first error.
func (f fleet) each(method string, args func(i int) any, reply func(i int) any) error {
	errs := make([]error, len(f))
	var wg sync.WaitGroup
	for i, h := range f {
		wg.Go(func() { errs[i] = h.call(method, args(i), reply(i)) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// same is args for every host.
func same(a any) func(int) any { return func(int) any { return a } }

func (f fleet) stats() HostStats {
	all := make([]HostStats, len(f))
	if err := f.each("Stats", same(Empty{}), func(i int) any { return &all[i] }); err != nil {
		logf("stats: %v", err)
	}
	var s HostStats
	for _, a := range all {
		s.APIWrites += a.APIWrites
		s.APIWriteErrors += a.APIWriteErrors
		s.Reports += a.Reports
		s.ReportFailures += a.ReportFailures
		s.AgentWrites += a.AgentWrites
		s.AgentWriteFailures += a.AgentWriteFailures
		s.TokenReviews += a.TokenReviews
		s.TokensVerified += a.TokensVerified
		s.LiveLookups += a.LiveLookups
		s.Refused += a.Refused
		s.Busy = max(s.Busy, a.Busy)
	}
	return s
}

// cpu is the CPU seconds the hosts' processes have used; 0 for the harness's own
// process, whose CPU is not a host's alone.
func (f fleet) cpu() float64 {
	var s float64
	for _, h := range f {
		if h.pid() != os.Getpid() {
			v, _ := cpuSeconds(h.pid())
			s += v
		}
	}
	return s
}
