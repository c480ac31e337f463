package nodeagent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// maxObjectBytes bounds the pods' lines of one NodeBreakerReport, as written. etcd refuses
// an object over 1.5 MiB, and every write of the object costs the API server in proportion
// to its size: a pod whose report would push its node's object past this is refused rather
// than costing every pod of the node their report.
const maxObjectBytes = 640 << 10

// maxDeparted bounds how many pods that left the node the agent remembers, so that a
// report the pod sent as it was being deleted does not bring its line back.
const (
	maxDeparted = 4096
	departedFor = 10 * time.Minute
)

// line is one pod's line of a node report: its name and its entries.
type line struct {
	pod     string
	entries []breakerconfig.ReportEntry
	// body is the entries as written, what a change is judged by.
	body []byte
}

func (l line) same(o line) bool { return l.pod == o.pod && bytes.Equal(l.body, o.body) }

// nsReport is one namespace's NodeBreakerReport: what the agent wants it to say, what the
// API server holds, and where its pacing stands (pacing.go).
type nsReport struct {
	lines        map[types.UID]line // what the object should say
	written      map[types.UID]line // what the API server holds
	writtenOwner types.UID          // the Node UID of the object written
	exists       bool               // the API server holds the object

	pending   change // changes no write has taken yet
	taken     change // the changes of the write in flight
	inflight  bool
	lastWrite time.Time // when the last successful write started
	retryAt   time.Time // after a failure: not before
	failures  int       // in a row
	failing   string    // the error of the current run of failures, logged once
}

func (r *nsReport) matchesWritten(owner types.UID) bool {
	if len(r.lines) == 0 {
		return !r.exists
	}
	if !r.exists || r.writtenOwner != owner || len(r.lines) != len(r.written) {
		return false
	}
	for uid, l := range r.lines {
		if w, ok := r.written[uid]; !ok || !l.same(w) {
			return false
		}
	}
	return true
}

// book holds the node's reports, one per namespace with reporting pods, and writes them.
// A pod's report replaces its line at once; writing is the writer's (pacing.go).
type book struct {
	node   string
	writer objectWriter
	clock  clock.WithTicker
	log    *slog.Logger
	pace   pacing

	wake chan struct{} // 1-buffered: one pending wake-up is enough

	mu       sync.Mutex
	owner    types.UID            // guarded by mu: the Node's UID
	reports  map[string]*nsReport // guarded by mu: by namespace
	departed map[types.UID]time.Time
	active   int // guarded by mu: writes in flight

	writes, failures atomic.Int64
}

func newBook(node string, w objectWriter, clk clock.WithTicker, log *slog.Logger) *book {
	return &book{
		node: node, writer: w, clock: clk, log: log, pace: defaultPacing,
		wake: make(chan struct{}, 1), reports: map[string]*nsReport{}, departed: map[types.UID]time.Time{},
	}
}

func (b *book) setOwner(uid types.UID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.owner = uid
}

func (b *book) counts() (writes, failures int64) { return b.writes.Load(), b.failures.Load() }

// signal wakes the writer.
func (b *book) signal() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// report returns the namespace's report, creating it. Caller holds mu.
func (b *book) report(ns string) *nsReport {
	r := b.reports[ns]
	if r == nil {
		r = &nsReport{lines: map[types.UID]line{}, written: map[types.UID]line{}}
		b.reports[ns] = r
	}
	return r
}

// changed records a change of r not yet written. Caller holds mu.
func (b *book) changed(r *nsReport, urgent bool) {
	if r.pending.since.IsZero() {
		r.pending.since = b.clock.Now()
	}
	r.pending.urgent = r.pending.urgent || urgent
	b.signal()
}

// put makes id's line say entries, which passed Validate. A resend of what the line says
// already changes nothing; a report with no entries takes the line out. It refuses (409)
// a pod the object has no room for, and (403) a pod that has left the node.
func (b *book) put(id identity, entries []breakerconfig.ReportEntry) error {
	body, err := json.Marshal(entries)
	if err != nil {
		return err
	}
	next := line{pod: id.pod, entries: entries, body: body}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, gone := b.departed[id.podUID]; gone {
		return refuse(http.StatusForbidden, "pod %s (uid %s) has left node %s", id, id.podUID, b.node)
	}
	if len(entries) == 0 {
		if r := b.reports[id.namespace]; r != nil {
			if _, had := r.lines[id.podUID]; had {
				delete(r.lines, id.podUID)
				b.changed(r, true)
			}
		}
		return nil
	}
	r := b.report(id.namespace)
	old, had := r.lines[id.podUID]
	switch {
	case had && old.same(next):
		return nil
	case !had && len(r.lines) >= resiliencev1alpha1.MaxNodeReportPods:
		return refuse(http.StatusConflict, "node %s's report in namespace %s carries %d pods, the most a NodeBreakerReport holds: pod %s's report is not carried", b.node, id.namespace, len(r.lines), id)
	}
	if size := r.size(id.podUID, next); size > maxObjectBytes {
		return refuse(http.StatusConflict, "with pod %s's report, node %s's report in namespace %s would hold %d bytes of entries, over the %d a NodeBreakerReport may: send fewer entries or shorter configErrors", id, b.node, id.namespace, size, maxObjectBytes)
	}
	r.lines[id.podUID] = next
	b.changed(r, urgent(old.entries, entries))
	return nil
}

// size is how many bytes the lines of r would take with uid's line replaced by l.
func (r *nsReport) size(uid types.UID, l line) int {
	const perLine = 96 // the name, uid and keys around the entries
	n := len(l.pod) + len(uid) + len(l.body) + perLine
	for u, o := range r.lines {
		if u != uid {
			n += len(o.pod) + len(u) + len(o.body) + perLine
		}
	}
	return n
}

// urgent reports whether replacing old entries with next brings news the fleet decides
// on, which is written in the next slot rather than held (pacing.go): an earned state
// (breakerconfig.Earned), a new config generation or refusal, a breaker leaving. What
// only says what the pod was told or what time did waits, as the pod's own reporter lets
// it wait (pkg/breaker/kube, earned.go).
func urgent(old, next []breakerconfig.ReportEntry) bool {
	was := make(map[string]breakerconfig.ReportEntry, len(old))
	for _, e := range old {
		was[e.Name] = e
	}
	for _, e := range next {
		o, ok := was[e.Name]
		delete(was, e.Name)
		switch {
		case !ok:
			if breakerconfig.Earned(e.State, e.Reason) || e.ConfigError != "" {
				return true
			}
		case o.State != e.State || o.Reason != e.Reason:
			if breakerconfig.Earned(e.State, e.Reason) {
				return true
			}
		case o.ConfigGeneration != e.ConfigGeneration || o.ConfigError != e.ConfigError:
			return true
		}
	}
	return len(was) > 0
}

// podGone takes the line of a pod that left the node (deleted, or finished) out of its
// namespace's report, and refuses its reports from now on.
func (b *book) podGone(ns string, uid types.UID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	if len(b.departed) >= maxDeparted {
		for u, at := range b.departed {
			if now.Sub(at) > departedFor || len(b.departed) >= maxDeparted {
				delete(b.departed, u)
			}
		}
	}
	b.departed[uid] = now
	r := b.reports[ns]
	if r == nil {
		return
	}
	if _, ok := r.lines[uid]; ok {
		delete(r.lines, uid)
		b.changed(r, false)
	}
}

// readBack takes the node's reports that the API server holds as written: a restarted
// agent then writes nothing the pods' resent reports do not change. The lines of pods no
// longer bound to the node (bound says which are) are dropped, and that change written.
func (b *book) readBack(ctx context.Context, bound func(string, types.UID) bool) error {
	list, err := b.writer.list(ctx, fields.OneTermEqualSelector("metadata.name", b.node).String())
	if err != nil {
		return fmt.Errorf("list this node's NodeBreakerReports: %w", err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, o := range list {
		if o.NodeName != b.node {
			continue
		}
		r := b.report(o.Metadata.Namespace)
		r.exists = true
		if len(o.Metadata.OwnerReferences) == 1 && o.Metadata.OwnerReferences[0].Kind == "Node" {
			r.writtenOwner = o.Metadata.OwnerReferences[0].UID
		}
		for _, p := range o.Pods {
			body, err := json.Marshal(p.Breakers)
			if err != nil {
				return err
			}
			l := line{pod: p.Name, entries: p.Breakers, body: body}
			r.written[p.UID] = l
			if bound(o.Metadata.Namespace, p.UID) {
				r.lines[p.UID] = l
			}
		}
		if !r.matchesWritten(b.owner) {
			b.changed(r, false)
		}
	}
	b.log.Info("Read back this node's reports", "namespaces", len(list))
	return nil
}

// nodeReportObject is a NodeBreakerReport as the agent writes and reads it: entries in
// their wire type, whose since keeps its milliseconds (metav1.Time would cut them).
type nodeReportObject struct {
	APIVersion string           `json:"apiVersion"`
	Kind       string           `json:"kind"`
	Metadata   nodeReportMeta   `json:"metadata"`
	NodeName   string           `json:"nodeName"`
	Pods       []nodeReportLine `json:"pods"`
}

type nodeReportMeta struct {
	Name            string                  `json:"name"`
	Namespace       string                  `json:"namespace"`
	ResourceVersion string                  `json:"resourceVersion,omitempty"`
	Labels          map[string]string       `json:"labels,omitempty"`
	Annotations     map[string]string       `json:"annotations,omitempty"`
	Finalizers      []string                `json:"finalizers,omitempty"`
	OwnerReferences []metav1.OwnerReference `json:"ownerReferences"`
}

type nodeReportLine struct {
	Name     string                      `json:"name"`
	UID      types.UID                   `json:"uid"`
	Breakers []breakerconfig.ReportEntry `json:"breakers"`
}
