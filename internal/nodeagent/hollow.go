package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// Hollow is a node agent without its port, its pod cache, its config watches or its pods:
// the agent's own book, pacing and writer (what a node costs the API server and the
// operator), fed synthetic pod reports by Report, as Kubernetes proves its control plane
// at scale with kubemark's hollow nodes. The fleet benchmark runs a thousand of them in
// one process against a real API server and the real manager (docs/benchmarks.md); it is
// not for production, where every report comes from a pod whose token the agent checked.
type Hollow struct {
	book *book
	pods *hollowPods
}

// HollowOptions configure a [Hollow].
type HollowOptions struct {
	// Config reaches the API server as the node's agent: its writes must pass the
	// admission policy of node reports (an identity bound to a pod of that node).
	Config *rest.Config
	// NodeName and NodeUID are the node's: its reports are named after it and owned by it.
	NodeName string
	NodeUID  types.UID
	// Logger receives what the agent has to say; nil means slog.Default().
	Logger *slog.Logger
}

// NewHollow returns a hollow agent for o.NodeName. It contacts nothing until Run.
func NewHollow(o HollowOptions) (*Hollow, error) {
	if o.Config == nil || o.NodeName == "" || o.NodeUID == "" {
		return nil, errors.New("nodeagent: a hollow agent needs Config, NodeName and NodeUID")
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	c := rest.CopyConfig(o.Config)
	c.QPS, c.Burst = 50, 100
	dc, err := dynamic.NewForConfig(c)
	if err != nil {
		return nil, fmt.Errorf("nodeagent: %w", err)
	}
	h := &Hollow{pods: &hollowPods{revisions: map[types.UID]string{}, wiredIn: map[string]map[types.UID]bool{}}}
	h.book = newBook(o.NodeName, newAPIWriter(dc.Resource(nodeReports), o.NodeName), clock.RealClock{}, log.With("node", o.NodeName))
	h.book.pods = h.pods
	h.book.setOwner(o.NodeUID)
	return h, nil
}

// Report takes a pod's whole report, as PUT /v1/report does once the pod's token is
// checked and its report validated: one that fails breakerconfig.AgentReport's Validate
// is refused. No entries take the pod's line out.
func (h *Hollow) Report(namespace, pod string, uid types.UID, revision string, entries []breakerconfig.ReportEntry) error {
	if err := (breakerconfig.AgentReport{Breakers: entries}).Validate(); err != nil {
		return err
	}
	h.pods.set(namespace, uid, revision)
	return h.book.put(identity{namespace: namespace, pod: pod, podUID: uid, node: h.book.node}, entries)
}

// Gone takes a pod's line out, as the agent does when its pod is deleted.
func (h *Hollow) Gone(namespace string, uid types.UID) {
	h.book.podGone(namespace, uid)
	h.pods.remove(namespace, uid)
}

// Run writes the node's reports until ctx ends.
func (h *Hollow) Run(ctx context.Context) { h.book.run(ctx) }

// Written reports whether every change the agent holds is written.
func (h *Hollow) Written() bool { return h.book.idle() }

// Writes returns how many node report writes the API server accepted and how many failed.
func (h *Hollow) Writes() (writes, failures int64) { return h.book.counts() }

// hollowPods is what a hollow agent knows of its synthetic pods: their revisions, and that
// each is wired to it.
type hollowPods struct {
	mu        sync.Mutex
	revisions map[types.UID]string
	wiredIn   map[string]map[types.UID]bool
}

func (p *hollowPods) set(namespace string, uid types.UID, revision string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.revisions[uid] = revision
	if p.wiredIn[namespace] == nil {
		p.wiredIn[namespace] = map[types.UID]bool{}
	}
	p.wiredIn[namespace][uid] = true
}

func (p *hollowPods) remove(namespace string, uid types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.revisions, uid)
	delete(p.wiredIn[namespace], uid)
}

func (p *hollowPods) revision(uid types.UID) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.revisions[uid]
}

func (p *hollowPods) wired(namespace string) []types.UID {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]types.UID, 0, len(p.wiredIn[namespace]))
	for uid := range p.wiredIn[namespace] {
		out = append(out, uid)
	}
	return out
}
