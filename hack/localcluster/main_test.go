package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/testbin"
	"github.com/fusebox-dev/fusebox/internal/testenv"
	"github.com/fusebox-dev/fusebox/internal/testutil"
)

// The local run as `make run` starts it, from the binaries the Makefile builds: up, it
// listens on loopback only (every process it started: the manager, kube-apiserver, etcd);
// a second run in the same directory is refused with one line naming the running one and
// its kubeconfig, and leaves that kubeconfig as it was, so the first is still reachable;
// Ctrl-C stops the first cleanly (issue 35, item 2).
func TestLocalRun(t *testing.T) {
	ctrllog.SetLogger(logr.Discard())
	if _, err := testenv.AssetsDir(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skipf("SKIPPED: no control plane (run hack/envtest.sh, or set KUBEBUILDER_ASSETS): %v", err)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	// The two executables as the build cache holds them (internal/testbin): linked once,
	// not on every run; bin is only where the printed commands say kubectl is.
	manager, err := testbin.Path(testbin.Manager)
	if err != nil {
		t.Fatal(err)
	}
	localcluster, err := testbin.Path(testbin.LocalCluster)
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	dir := filepath.Join(t.TempDir(), "local")
	kubeconfig := filepath.Join(dir, "kubeconfig")
	localRun := func(stderr *testutil.SyncBuffer) *exec.Cmd {
		cmd := exec.Command(localcluster, "--kubeconfig-out", kubeconfig,
			"--manager", manager, "--bin", bin, "--sample-workload=false", "--narrate=false")
		cmd.Dir = root
		cmd.Stdout, cmd.Stderr = stderr, stderr
		return cmd
	}

	var firstSaid testutil.SyncBuffer
	first := localRun(&firstSaid)
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	firstDone := make(chan error, 1)
	go func() { firstDone <- first.Wait() }()
	t.Cleanup(func() {
		select {
		case <-firstDone:
		default:
			_ = first.Process.Kill()
			<-firstDone
		}
	})
	testutil.Eventually(t, 3*time.Minute, "the first run is up", func() error {
		select {
		case err := <-firstDone:
			firstDone <- err
			return fmt.Errorf("the first run ended (%v):\n%s", err, firstSaid.String())
		default:
		}
		if !strings.Contains(firstSaid.String(), "Fusebox is running") {
			return errors.New("not up yet")
		}
		return nil
	})

	// Every process of the run listens on loopback only.
	tree := processTree(t, first.Process.Pid)
	listening := listeningSockets(t)
	found := map[string]int{}
	for _, pid := range tree {
		name := processName(pid)
		for _, inode := range socketInodes(pid) {
			addr, ok := listening[inode]
			if !ok {
				continue
			}
			found[name]++
			if !addr.IP.IsLoopback() {
				t.Errorf("%s (pid %d) listens on %s, not on loopback", name, pid, addr)
			}
		}
	}
	t.Logf("listening sockets by process: %v", found)
	// Metrics, health probes and webhooks; the API server's port; etcd's client and peer.
	if found["manager"] < 3 || found["kube-apiserver"] < 1 || found["etcd"] < 1 {
		t.Errorf("listening sockets by process %v: want the manager's 3, the API server's and etcd's", found)
	}

	before, err := os.ReadFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	var secondSaid testutil.SyncBuffer
	second := localRun(&secondSaid)
	err = second.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Errorf("the second run: %v, want exit status 1", err)
	}
	said := strings.TrimSpace(secondSaid.String())
	t.Logf("the second run said: %s", said)
	if strings.Contains(said, "\n") {
		t.Errorf("the second run said more than one line:\n%s", said)
	}
	for _, want := range []string{"already runs", "pid " + strconv.Itoa(first.Process.Pid), "KUBECONFIG=" + kubeconfig} {
		if !strings.Contains(said, want) {
			t.Errorf("the second run's %q does not say %q", said, want)
		}
	}
	if after, err := os.ReadFile(kubeconfig); err != nil || !bytes.Equal(after, before) {
		t.Errorf("the second run changed the first's kubeconfig (%v)", err)
	}

	// The first still answers through its kubeconfig.
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := resiliencev1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	var list resiliencev1alpha1.CircuitBreakerList
	if err := cl.List(context.Background(), &list, client.InNamespace("default")); err != nil {
		t.Fatalf("the first run no longer answers: %v", err)
	}
	if len(list.Items) != 3 {
		t.Errorf("%d CircuitBreakers, want the 3 samples", len(list.Items))
	}

	if err := first.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-firstDone:
		firstDone <- err
		if err != nil {
			t.Errorf("the first run, interrupted: %v\n%s", err, firstSaid.String())
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("the first run still runs 2 minutes after Ctrl-C:\n%s", firstSaid.String())
	}
}

// processTree is pid and every process descended from it.
func processTree(t *testing.T, pid int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	parent := map[int]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after its ")".
		fields := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
		if len(fields) > 1 {
			parent[p], _ = strconv.Atoi(fields[1])
		}
	}
	tree := []int{pid}
	for i := 0; i < len(tree); i++ {
		for p, pp := range parent {
			if pp == tree[i] {
				tree = append(tree, p)
			}
		}
	}
	return tree
}

func processName(pid int) string {
	raw, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return strings.TrimSpace(string(raw))
}

// socketInodes are the inodes of the sockets pid has open.
func socketInodes(pid int) []string {
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	var inodes []string
	for _, fd := range fds {
		link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if inode, ok := strings.CutPrefix(link, "socket:["); err == nil && ok {
			inodes = append(inodes, strings.TrimSuffix(inode, "]"))
		}
	}
	return inodes
}

// listeningSockets maps the inode of every listening TCP socket of this network namespace
// to its local address.
func listeningSockets(t *testing.T) map[string]*net.TCPAddr {
	t.Helper()
	out := map[string]*net.TCPAddr{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		raw, err := os.ReadFile(table)
		if err != nil {
			continue // no IPv6
		}
		for _, line := range strings.Split(string(raw), "\n")[1:] {
			// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
			f := strings.Fields(line)
			if len(f) < 10 || f[3] != "0A" { // 0A: LISTEN
				continue
			}
			addr, err := procAddress(f[1])
			if err != nil {
				t.Fatalf("%s: %q: %v", table, f[1], err)
			}
			out[f[9]] = addr
		}
	}
	return out
}

// procAddress reads /proc/net/tcp's "0100007F:1F90": the address in 32-bit words of the
// host's byte order (little-endian here), the port in hex.
func procAddress(s string) (*net.TCPAddr, error) {
	hexIP, hexPort, ok := strings.Cut(s, ":")
	if !ok {
		return nil, errors.New("no port")
	}
	raw, err := hex.DecodeString(hexIP)
	if err != nil || len(raw)%4 != 0 {
		return nil, fmt.Errorf("address %q", hexIP)
	}
	for i := 0; i < len(raw); i += 4 {
		raw[i], raw[i+1], raw[i+2], raw[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
	}
	port, err := strconv.ParseUint(hexPort, 16, 16)
	if err != nil {
		return nil, err
	}
	return &net.TCPAddr{IP: net.IP(raw), Port: int(port)}, nil
}
