package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/fusebox-dev/fusebox/internal/nodeagent"
	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/kube"
)

// Host runs pods: every pod of the fleet in the harness's own process (the per-pod
// mode: each pod writes its own BreakerReport through the API), or, with FLEET_NODES,
// whole nodes in a node host process (nodehost_test.go): each node's agent, the real
// internal/nodeagent under its node-bound identity, and the pods bound to that node,
// each talking to its agent over loopback HTTP with its own bound token. Its methods
// are net/rpc's shape, so that the harness calls a Host in its own process and one in a
// node host alike; times cross as Unix nanoseconds, since the processes share a clock.
type Host struct {
	base *rest.Config // the administrator's; every client made from it impersonates

	mu     sync.Mutex
	pods   []*hostedPod
	nodes  []*hostedNode
	podCtx context.Context
	stop   context.CancelFunc

	// The pods' own API writes in the per-pod mode, counted client side; inFlight are
	// sent and not answered yet, lastEnded the Unix nanoseconds of the last answer.
	writes, writeErrors, inFlight, lastEnded atomic.Int64
}

// HostPod is one pod of a host: its index in the fleet, its Pod object, and in node
// mode its node and the file of its token for the node's agent.
type HostPod struct {
	Index                      int
	Name, UID, Node, TokenFile string
}

// HostNode is one node of a node host: its Node object and its agent's Pod.
type HostNode struct {
	Name, UID, AgentPod, AgentPodUID string
}

type hostedPod struct {
	HostPod
	agent *kube.Connection
}

type hostedNode struct {
	HostNode
	agent *nodeagent.Agent
	url   string
	stop  context.CancelFunc
	done  chan error
}

func newHost(base *rest.Config) *Host {
	ctx, cancel := context.WithCancel(context.Background())
	return &Host{base: base, podCtx: ctx, stop: cancel}
}

// Empty is the argument or answer of a call that needs none.
type Empty struct{}

// StartNodesArgs are the nodes whose agents a host runs.
type StartNodesArgs struct {
	Nodes    []HostNode
	Deadline int64
}

// StartNodes starts every node's agent on a loopback port and waits until all are
// ready (they know their Node, their pod caches have synced).
func (h *Host) StartNodes(args StartNodesArgs, ready *time.Duration) error {
	start := time.Now()
	quiet := slog.New(slog.DiscardHandler)
	for _, n := range args.Nodes {
		a, err := nodeagent.New(nodeagent.Options{Config: agentIdentity(h.base, n), NodeName: n.Name, Logger: quiet})
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return fmt.Errorf("listen for the agent of %s: %w", n.Name, err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		hn := &hostedNode{HostNode: n, agent: a, url: "http://" + ln.Addr().String(), stop: cancel, done: make(chan error, 1)}
		go func() { hn.done <- a.Run(ctx, ln) }()
		h.mu.Lock()
		h.nodes = append(h.nodes, hn)
		h.mu.Unlock()
	}
	for _, n := range h.nodes {
		for !n.agent.Ready() {
			if time.Now().After(time.Unix(0, args.Deadline)) {
				return fmt.Errorf("the agent of %s is not ready after %s", n.Name, fmtDur(time.Since(start)))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	*ready = time.Since(start)
	return nil
}

// StartPodsArgs are the pods a host runs, and the breakers each uses at once.
type StartPodsArgs struct {
	Namespace string
	Pods      []HostPod
	Breakers  []string
}

// StartPods starts every pod's kube agent: wired to its node's agent in node mode,
// else reading its ConfigMap and writing its own BreakerReport under its own identity.
// It answers how long starting them all took.
func (h *Host) StartPods(args StartPodsArgs, took *time.Duration) error {
	start := time.Now()
	quiet := slog.New(slog.DiscardHandler)
	agents := map[string]string{}
	for _, n := range h.nodes {
		agents[n.Name] = n.url
	}
	for _, p := range args.Pods {
		o := kube.Options{Logger: quiet}
		if p.Node != "" {
			if o.NodeAgent = agents[p.Node]; o.NodeAgent == "" {
				return fmt.Errorf("pod %s is bound to node %s, whose agent this host does not run", p.Name, p.Node)
			}
			o.NodeAgentToken = p.TokenFile
		} else {
			o.Config, o.Namespace, o.Pod, o.PodUID = h.podConfig(args.Namespace, p), args.Namespace, p.Name, p.UID
		}
		a, err := kube.Connect(h.podCtx, o)
		if err != nil {
			return fmt.Errorf("start the agent of %s: %w", p.Name, err)
		}
		for _, b := range args.Breakers {
			a.Registry().Get(b)
		}
		h.mu.Lock()
		h.pods = append(h.pods, &hostedPod{HostPod: p, agent: a})
		h.mu.Unlock()
	}
	*took = time.Since(start)
	return nil
}

// podConfig is one pod's rest.Config in the per-pod mode: its own copy, under the pod's
// own identity (identity_test.go), at client-go's default rate limits as
// rest.InClusterConfig gives a real pod (5 QPS, burst 10), and with its own
// connections: a Proxy func keeps client-go from sharing one cached transport between
// the agents, as separate processes would not.
func (h *Host) podConfig(ns string, p HostPod) *rest.Config {
	c := rest.CopyConfig(h.base)
	c.Impersonate = podIdentity(ns, p.Name, types.UID(p.UID))
	c.QPS, c.Burst = 0, 0
	c.Proxy = func(*http.Request) (*url.URL, error) { return nil, nil }
	c.Wrap(func(rt http.RoundTripper) http.RoundTripper { return countingTransport{next: rt, h: h} })
	return c
}

// Use has every pod use the named breakers (Registry.Get), as an application that
// starts calling through them.
func (h *Host) Use(names []string, _ *Empty) error {
	for _, p := range h.all() {
		for _, n := range names {
			p.agent.Registry().Get(n)
		}
	}
	return nil
}

// TripArgs: Trip() the breaker of every pod whose fleet index is a multiple of Every,
// at At (Unix nanoseconds), so that hosts in several processes trip together.
type TripArgs struct {
	Breaker string
	Every   int
	At      int64
	// Profile, if not empty, has a node host write a CPU profile of its next 20 s from At
	// (profileHost).
	Profile string
}

// Trip answers when its last Trip() returned.
func (h *Host) Trip(args TripArgs, done *int64) error {
	brs := h.breakers(args.Breaker, args.Every)
	time.Sleep(time.Until(time.Unix(0, args.At)))
	profileHost(args.Profile)
	for _, b := range brs {
		b.Trip()
	}
	*done = time.Now().UnixNano()
	return nil
}

// WaitArgs: wait until every pod's breaker is in State, until Deadline.
type WaitArgs struct {
	Breaker  string
	State    breaker.State
	Deadline int64
}

// WaitReply is when every pod's breaker was seen in the state (polled every 5 ms), or
// how many were not at the deadline.
type WaitReply struct {
	At   int64
	Left int
}

func (h *Host) Wait(args WaitArgs, reply *WaitReply) error {
	brs := h.breakers(args.Breaker, 1)
	deadline := time.Unix(0, args.Deadline)
	for i := 0; i < len(brs); {
		if brs[i].State() == args.State {
			i++
			continue
		}
		if time.Now().After(deadline) {
			reply.Left = len(brs) - i
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	reply.At = time.Now().UnixNano()
	return nil
}

// PolicyArgs: wait until every pod's breaker runs a policy of failure ratio Ratio.
type PolicyArgs struct {
	Breaker         string
	Ratio           float64
	Start, Deadline int64
}

// PolicyReply is, per pod that got there, how long after Start it was seen (polled
// every 5 ms), and how many did not by the deadline.
type PolicyReply struct {
	PerPod []time.Duration
	Left   int
}

func (h *Host) WaitPolicy(args PolicyArgs, reply *PolicyReply) error {
	brs := h.breakers(args.Breaker, 1)
	start, deadline := time.Unix(0, args.Start), time.Unix(0, args.Deadline)
	seen := make([]bool, len(brs))
	left := len(brs)
	for left > 0 && time.Now().Before(deadline) {
		for j, b := range brs {
			if !seen[j] && math.Abs(b.Policy().FailureRatio-args.Ratio) < 1e-9 {
				seen[j] = true
				left--
				reply.PerPod = append(reply.PerPod, time.Since(start))
			}
		}
		if left > 0 {
			time.Sleep(5 * time.Millisecond)
		}
	}
	reply.Left = left
	return nil
}

// RecoverArgs: close every pod's breaker with successful calls, each retried every
// 10 ms while refused (its open timeout has not passed, or another probe is out), until
// Deadline.
type RecoverArgs struct {
	Breaker  string
	Deadline int64
}

// Recover answers how many pods' breakers still refused at the deadline.
func (h *Host) Recover(args RecoverArgs, stillOpen *int) error {
	deadline := time.Unix(0, args.Deadline)
	ok := func(context.Context) error { return nil }
	for _, b := range h.breakers(args.Breaker, 1) {
		for b.Execute(h.podCtx, ok) != nil {
			if time.Now().After(deadline) {
				*stillOpen++
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return nil
}

// HostStats is what a host's pods and agents have done, summed.
type HostStats struct {
	// The pods' own API writes (per-pod mode, client side).
	APIWrites, APIWriteErrors int64
	// Reports the receiver (the API server, or the node agent) accepted, and failures.
	Reports, ReportFailures int64
	// The node agents': NodeBreakerReport writes the API server accepted, failed ones,
	// TokenReviews asked, tokens verified against the issuer's keys, pods read live,
	// requests refused.
	AgentWrites, AgentWriteFailures, TokenReviews, TokensVerified, LiveLookups, Refused int64
	// Busy is the last moment something was being written (Unix nanoseconds): now while
	// a pod's write is in flight or a change waits in a pod or an agent.
	Busy int64
}

func (h *Host) Stats(_ Empty, s *HostStats) error {
	s.APIWrites, s.APIWriteErrors = h.writes.Load(), h.writeErrors.Load()
	s.Busy = h.lastEnded.Load()
	now := time.Now().UnixNano()
	if h.inFlight.Load() > 0 {
		s.Busy = now
	}
	h.mu.Lock()
	nodes := h.nodes
	h.mu.Unlock()
	for _, p := range h.all() {
		st := p.agent.Stats()
		s.Reports += st.Writes
		s.ReportFailures += st.WriteFailures
		if p.Node != "" && !p.agent.ReportWritten() {
			s.Busy = now
		}
	}
	for _, n := range nodes {
		st := n.agent.Stats()
		s.AgentWrites += st.Writes
		s.AgentWriteFailures += st.WriteFailures
		s.TokenReviews += st.TokenReviews
		s.TokensVerified += st.TokensVerified
		s.LiveLookups += st.LiveLookups
		s.Refused += st.Refused
		if !n.agent.Written() {
			s.Busy = now
		}
	}
	return nil
}

// Stop ends every pod's agent, then every node's, waiting at most 30 s for each kind.
func (h *Host) Stop(_ Empty, _ *Empty) error {
	h.stop()
	var errs []error
	deadline := time.After(30 * time.Second)
	for _, p := range h.all() {
		select {
		case <-p.agent.Done():
		case <-deadline:
			return errors.New("pods' agents still running 30 s after being stopped")
		}
	}
	h.mu.Lock()
	nodes := h.nodes
	h.mu.Unlock()
	for _, n := range nodes {
		n.stop()
	}
	for _, n := range nodes {
		select {
		case err := <-n.done:
			if err != nil {
				errs = append(errs, fmt.Errorf("agent of %s: %w", n.Name, err))
			}
		case <-deadline:
			return errors.Join(append(errs, errors.New("node agents still running 30 s after being stopped"))...)
		}
	}
	return errors.Join(errs...)
}

func (h *Host) all() []*hostedPod {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.pods
}

// breakers returns the named breaker of every pod whose fleet index is a multiple of
// every, in index order.
func (h *Host) breakers(name string, every int) []*breaker.Breaker {
	var out []*breaker.Breaker
	for _, p := range h.all() {
		if p.Index%every == 0 {
			out = append(out, p.agent.Registry().Get(name))
		}
	}
	return out
}

// countingTransport counts a pod's API writes (every request but GET and HEAD) and
// the ones that failed.
type countingTransport struct {
	next http.RoundTripper
	h    *Host
}

func (c countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return c.next.RoundTrip(r)
	}
	c.h.inFlight.Add(1)
	resp, err := c.next.RoundTrip(r)
	c.h.lastEnded.Store(time.Now().UnixNano())
	c.h.inFlight.Add(-1)
	c.h.writes.Add(1)
	if err != nil || resp.StatusCode >= 400 {
		c.h.writeErrors.Add(1)
	}
	return resp, err
}

// WrappedRoundTripper lets client-go reach the transport underneath, to close the
// agent's idle connections when it stops.
func (c countingTransport) WrappedRoundTripper() http.RoundTripper { return c.next }
