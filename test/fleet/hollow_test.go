package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/fusebox-dev/fusebox/internal/nodeagent"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// HollowHost runs hollow nodes (FLEET_HOLLOW) in a node host process: per node a hollow
// agent (nodeagent.NewHollow: the real agent's book, pacing and writer, under its node's
// agent identity), and per pod bound to the node a synthetic pod (hollowpods_test.go)
// whose every change is reported to its node's agent as the pod's whole report, as PUT
// /v1/report hands it over. The host watches the namespace's fusebox-breakers ConfigMap
// once, not once per node, and applies each change to all of its pods: the config's
// fan-out to the nodes is not simulated. It answers the harness's calls as Host does, so
// that the scenarios drive hollow and real nodes alike.
type HollowHost struct {
	name string
	base *rest.Config
	log  *slog.Logger

	ctx    context.Context // the agents and the config watch
	cancel context.CancelFunc
	runs   sync.WaitGroup // the agents' writers and the config watch

	// mu guards what follows, and is held from a change of the pods until their reports
	// are in their agents' books, so that each pod's reports reach its agent in order.
	mu        sync.Mutex
	nodes     map[string]*hollowNode
	order     []*hollowNode // as the harness gave them
	pods      []*hollowPod
	namespace string
	watching  bool
	synced    cache.InformerSynced
	use       map[string]bool                 // the breakers the pods use
	configs   map[string]breakerconfig.Config // the published config, as last applied
	// appliedAt is when each breaker's failure ratio, as last changed, was applied to
	// every pod (WaitPolicy).
	appliedAt map[string]time.Time
	ratio     map[string]float64

	reports, refused atomic.Int64
}

type hollowNode struct {
	HostNode
	agent *nodeagent.Hollow
	pods  []*hollowPod
}

// hollowPod is one synthetic pod: its entries by breaker, and when each last changed
// state (Wait).
type hollowPod struct {
	HostPod
	node      *hollowNode
	entries   map[string]breakerconfig.ReportEntry
	changedAt map[string]time.Time
}

func newHollowHost(base *rest.Config, name string) *HollowHost {
	ctx, cancel := context.WithCancel(context.Background())
	// The agents' refusals and failures, not their chatter: a refused write is what a run
	// must not miss.
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})).With("nodeHost", name)
	return &HollowHost{
		name: name, base: base, log: log, ctx: ctx, cancel: cancel,
		nodes: map[string]*hollowNode{}, use: map[string]bool{}, configs: map[string]breakerconfig.Config{},
		appliedAt: map[string]time.Time{}, ratio: map[string]float64{},
	}
}

// StartNodes starts a hollow agent per node. They have nothing to sync: ready at once.
func (h *HollowHost) StartNodes(args StartNodesArgs, ready *time.Duration) error {
	start := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, n := range args.Nodes {
		a, err := nodeagent.NewHollow(nodeagent.HollowOptions{Config: agentIdentity(h.base, n), NodeName: n.Name, NodeUID: types.UID(n.UID), Logger: h.log})
		if err != nil {
			return err
		}
		hn := &hollowNode{HostNode: n, agent: a}
		h.nodes[n.Name] = hn
		h.order = append(h.order, hn)
		h.runs.Go(func() { a.Run(h.ctx) })
	}
	*ready = time.Since(start)
	return nil
}

// StartPods makes the host's pods, starts the config watch of their namespace and waits
// for its first list, then has every pod report the named breakers that are published,
// Closed/Started: every pod starts at once.
func (h *HollowHost) StartPods(args StartPodsArgs, took *time.Duration) error {
	start := time.Now()
	h.mu.Lock()
	for _, p := range args.Pods {
		n := h.nodes[p.Node]
		if n == nil {
			h.mu.Unlock()
			return fmt.Errorf("pod %s is bound to node %s, which this host does not run", p.Name, p.Node)
		}
		hp := &hollowPod{HostPod: p, node: n, entries: map[string]breakerconfig.ReportEntry{}, changedAt: map[string]time.Time{}}
		n.pods = append(n.pods, hp)
		h.pods = append(h.pods, hp)
	}
	for _, b := range args.Breakers {
		h.use[b] = true
	}
	h.namespace = args.Namespace
	err := h.watchConfig()
	synced := h.synced
	h.mu.Unlock()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(h.ctx, time.Minute)
	defer cancel()
	if !cache.WaitForCacheSync(ctx.Done(), synced) {
		return fmt.Errorf("node host %s: the %s ConfigMap's watch did not list within a minute", h.name, breakerconfig.ConfigMapName)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.applyConfigs(time.Now())
	*took = time.Since(start)
	return nil
}

// watchConfig starts the one watch of the namespace's fusebox-breakers ConfigMap,
// field-selected on its name as the agents' own, under the first node's agent identity.
// Caller holds mu.
func (h *HollowHost) watchConfig() error {
	if h.watching {
		return nil
	}
	if len(h.order) == 0 {
		return errors.New("no node to watch the config as")
	}
	cs, err := kubernetes.NewForConfig(agentIdentity(h.base, h.order[0].HostNode))
	if err != nil {
		return err
	}
	lw := cache.NewListWatchFromClient(cs.CoreV1().RESTClient(), "configmaps", h.namespace,
		fields.OneTermEqualSelector("metadata.name", breakerconfig.ConfigMapName))
	inf := cache.NewSharedInformer(lw, &corev1.ConfigMap{}, 0)
	onChange := func(obj any) {
		if cm, ok := obj.(*corev1.ConfigMap); ok {
			h.configChanged(cm)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    onChange,
		UpdateFunc: func(_, obj any) { onChange(obj) },
	}); err != nil {
		return err
	}
	h.runs.Go(func() { inf.RunWithContext(h.ctx) })
	h.watching, h.synced = true, inf.HasSynced
	return nil
}

// configChanged takes the ConfigMap's documents as the published config and applies them
// to every pod.
func (h *HollowHost) configChanged(cm *corev1.ConfigMap) {
	configs := map[string]breakerconfig.Config{}
	for key, doc := range cm.Data {
		name, ok := strings.CutSuffix(key, ".json")
		if !ok {
			continue
		}
		c, err := breakerconfig.Parse([]byte(doc))
		if err != nil {
			h.log.Error("A published config does not parse", "breaker", name, "error", err)
			continue
		}
		configs[name] = c
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.configs = configs
	h.applyConfigs(time.Now())
}

// applyConfigs brings every pod's entries of the breakers it uses to the published config
// at now: a breaker published since gets its Started entry, the others their generation
// and the fleet's verdict. A pod sends its report when that moved what a real pod's
// reporter sends at once for (sendsNow). Caller holds mu.
func (h *HollowHost) applyConfigs(now time.Time) {
	var changed []*hollowPod
	for name := range h.use {
		c, ok := h.configs[name]
		if !ok {
			continue
		}
		for _, p := range h.pods {
			e, had := p.entries[name]
			if !had {
				e = startedEntry(name, now, c.Generation)
			}
			next := configure(e, c, now)
			if p.set(name, next, now) && (!had || sendsNow(e, next)) {
				changed = append(changed, p)
			}
		}
		if r, ok := h.ratio[name]; !ok || math.Abs(r-c.FailureRatio) > 1e-9 {
			h.ratio[name], h.appliedAt[name] = c.FailureRatio, now
		}
	}
	h.send(changed)
}

// set makes the pod's entry of name say e, and reports whether that changed it. Caller
// holds the host's mu.
func (p *hollowPod) set(name string, e breakerconfig.ReportEntry, now time.Time) bool {
	old, had := p.entries[name]
	if had && reflect.DeepEqual(old, e) {
		return false
	}
	if !had || old.State != e.State {
		p.changedAt[name] = now
	}
	p.entries[name] = e
	return true
}

// send reports each changed pod's whole report to its node's agent: the nodes in
// parallel, each node's pods one after the other, so that a node's changes reach its
// agent within moments, as its real pods' do. Caller holds mu.
func (h *HollowHost) send(changed []*hollowPod) {
	byNode := map[*hollowNode][]*hollowPod{}
	var nodes []*hollowNode
	for _, p := range changed {
		if byNode[p.node] == nil {
			nodes = append(nodes, p.node)
		}
		byNode[p.node] = append(byNode[p.node], p)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(nodes)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(nodes) {
					return
				}
				for _, p := range byNode[nodes[i]] {
					err := nodes[i].agent.Report(h.namespace, p.Name, types.UID(p.UID), "", sortedEntries(p.entries))
					if err != nil {
						if h.refused.Add(1) == 1 {
							h.log.Error("A hollow agent refused a synthetic report", "pod", p.Name, "error", err)
						}
						continue
					}
					h.reports.Add(1)
				}
			}
		})
	}
	wg.Wait()
}

// Use has every pod use the named breakers too.
func (h *HollowHost) Use(names []string, _ *Empty) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, n := range names {
		h.use[n] = true
	}
	h.applyConfigs(time.Now())
	return nil
}

// Trip opens, at At, the named breaker of every pod whose fleet index is a multiple of
// Every, by its own calls (Open/Tripped), and answers when the last report was in.
func (h *HollowHost) Trip(args TripArgs, done *int64) error {
	time.Sleep(time.Until(time.Unix(0, args.At)))
	profileHost(args.Profile)
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	openTimeout := time.Duration(h.configs[args.Breaker].OpenTimeout)
	var changed []*hollowPod
	for _, p := range h.pods {
		e, ok := p.entries[args.Breaker]
		if ok && p.Index%args.Every == 0 && p.set(args.Breaker, tripped(e, now, openTimeout), now) {
			changed = append(changed, p)
		}
	}
	h.send(changed)
	*done = time.Now().UnixNano()
	return nil
}

// Wait waits until every pod's named breaker is in State, and answers when the host put
// the last of them there (polled every 5 ms), or how many were not at the deadline.
func (h *HollowHost) Wait(args WaitArgs, reply *WaitReply) error {
	want := wireState[args.State]
	deadline := time.Unix(0, args.Deadline)
	for {
		h.mu.Lock()
		left, last := 0, time.Time{}
		for _, p := range h.pods {
			if p.entries[args.Breaker].State != want {
				left++
			} else if at := p.changedAt[args.Breaker]; at.After(last) {
				last = at
			}
		}
		h.mu.Unlock()
		if left == 0 {
			reply.At = last.UnixNano()
			return nil
		}
		if time.Now().After(deadline) {
			reply.Left = left
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// WaitPolicy waits until the host has applied a config of the named breaker with failure
// ratio Ratio, and answers that time for every pod.
func (h *HollowHost) WaitPolicy(args PolicyArgs, reply *PolicyReply) error {
	start, deadline := time.Unix(0, args.Start), time.Unix(0, args.Deadline)
	for {
		h.mu.Lock()
		r, at, n := h.ratio[args.Breaker], h.appliedAt[args.Breaker], len(h.pods)
		h.mu.Unlock()
		if math.Abs(r-args.Ratio) < 1e-9 {
			reply.PerPod = make([]time.Duration, n)
			for i := range reply.PerPod {
				reply.PerPod[i] = at.Sub(start)
			}
			return nil
		}
		if time.Now().After(deadline) {
			reply.Left = n
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Recover closes the named breaker of every pod not closed with one successful probe
// (Closed/ProbesSucceeded). None refuses: the harness calls it once the open period has
// passed.
func (h *HollowHost) Recover(args RecoverArgs, stillOpen *int) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	var changed []*hollowPod
	for _, p := range h.pods {
		e, ok := p.entries[args.Breaker]
		if ok && e.State != breakerconfig.StateClosed && p.set(args.Breaker, probed(e, now), now) {
			changed = append(changed, p)
		}
	}
	h.send(changed)
	*stillOpen = 0
	return nil
}

// Stats: the synthetic reports the agents took and refused, and the agents' writes. Busy
// is now while an agent holds a change it has not written.
func (h *HollowHost) Stats(_ Empty, s *HostStats) error {
	s.Reports, s.ReportFailures = h.reports.Load(), h.refused.Load()
	h.mu.Lock()
	nodes := h.order
	h.mu.Unlock()
	for _, n := range nodes {
		w, f := n.agent.Writes()
		s.AgentWrites += w
		s.AgentWriteFailures += f
		if !n.agent.Written() {
			s.Busy = time.Now().UnixNano()
		}
	}
	return nil
}

// Stop ends the agents' writers and the config watch, waiting at most 40 s (a write in
// flight runs for at most 30 s).
func (h *HollowHost) Stop(_ Empty, _ *Empty) error {
	h.cancel()
	done := make(chan struct{})
	go func() {
		h.runs.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-time.After(40 * time.Second):
		return errors.New("hollow agents still writing 40 s after being stopped")
	}
}

// hollowHostPods: by default a hollow host is started per hollowHostPods synthetic pods,
// and at most one per CPU (hollowHosts).
const hollowHostPods = 25000

// hollowHosts is how many hollow host processes run pods pods on a machine of cpus CPUs.
// A hollow node holds no connection but its agent's API client, so what bounds a host is
// CPU, not descriptors. Its work comes in bursts: a verdict reaches all of the host's
// pods at once, and the host hands each changed pod's report to its agent (about 25 µs
// each on this project's shared 2-core machine: validation, JSON, the book) before the
// agents rewrite their nodes' objects. An incident changes about every pod twice (the
// trips or the adoptions, then the tripped pods re-timed to the verdict), so a host of
// 25,000 pods spends about 0.6 CPU-s on a verdict's burst, well inside the 2 s "every
// pod holds the verdict" aim even on one core, and about 70 µs per pod per incident in
// all (0.14 CPU-s for 2,000 pods, measured). One host per CPU at most: the hosts share the
// machine's cores with the API server and the operator, and more processes than cores
// would only take turns on them: on a 2-core machine 100,000 pods run in 2 hosts of
// 50,000, each with about 1.2 CPU-s of a verdict's burst, the two in parallel.
func hollowHosts(pods, cpus int) int {
	return max(1, min((pods+hollowHostPods-1)/hollowHostPods, cpus))
}
