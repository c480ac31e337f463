package nodeagent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/counting"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// maxDeparted bounds how many pods that left the node the agent remembers, so that a
// report the pod sent as it was being deleted does not bring its line back.
const (
	maxDeparted = 4096
	departedFor = 10 * time.Minute
)

// restartHold is how long, at most, a restarted agent holds the objects it read back
// before writing them again: its pods' lines were in the process it replaced, and each
// pod sends its report again once it sees the new agent. Written before they have, an
// object would count fewer pods than run, and the fleet's counts would dip; held until
// every pod wired to the agent has reported (or this long), the first write says what
// the API server holds when nothing changed meanwhile, and is not made. A pod finds the
// new agent on its config stream's reconnect backoff (at most 8 s, jittered up to 12 s,
// after a dial that may time out): 30 s outlasts it on a loaded node, where 10 s did not.
const restartHold = 30 * time.Second

// line is one pod's last report, as the agent keeps it on the node: its name and entries.
type line struct {
	pod     string
	entries []breakerconfig.ReportEntry
	// body is the entries as sent, what a resend is judged by.
	body []byte
	// revision is the pod's revision as the pod cache said when the line was put or the
	// pod relabelled: the entries (pairs) its breakers take room in.
	revision string
}

// pair is an entry of a node report: a breaker and a revision.
type pair struct{ name, revision string }

func (l line) same(o line) bool { return l.pod == o.pod && bytes.Equal(l.body, o.body) }

// nsReport is one namespace's NodeBreakerReport: the lines of the pods it adds up, what
// the API server holds, and where its pacing stands (pacing.go).
type nsReport struct {
	lines map[types.UID]line // the node's pods that report in the namespace; set by setLine
	// pairs is how many lines take room in each entry: kept as lines change, so that a
	// report is judged against MaxNodeReportEntries without walking every line.
	pairs        map[pair]int
	written      []byte    // the entries the API server holds, as JSON
	writtenOwner types.UID // the Node UID of the object written
	exists       bool      // the API server holds the object
	// heldUntil: a restarted agent writes the object read back no sooner (restartHold),
	// unless every pod wired to it has reported.
	heldUntil time.Time

	pending   change // changes no write has taken yet
	taken     change // the changes of the write in flight
	inflight  bool
	lastWrite time.Time // when the last successful write started
	retryAt   time.Time // after a failure: not before
	failures  int       // in a row
	failing   string    // the error of the current run of failures, logged once
}

// book holds the node's pods' lines, adds them up into one report per namespace with
// reporting pods (counting.Node), and writes them. A pod's report replaces its line at
// once; writing is the writer's (pacing.go).
type book struct {
	node   string
	writer objectWriter
	clock  clock.WithTicker
	log    *slog.Logger
	pace   pacing
	// pods says what the agent's pod cache knows of the node's pods: their revision, and
	// which pods wired to the agent run in a namespace.
	pods podLookup

	wake chan struct{} // 1-buffered: one pending wake-up is enough

	mu       sync.Mutex
	owner    types.UID            // guarded by mu: the Node's UID
	reports  map[string]*nsReport // guarded by mu: by namespace
	departed map[types.UID]time.Time
	active   int // guarded by mu: writes in flight

	writes, failures atomic.Int64
	latency          writeLatency
}

// podLookup is what the book reads of the agent's pod cache.
type podLookup interface {
	// revision is the revision of the pod of uid ("" for none, or a pod not cached).
	revision(uid types.UID) string
	// wired returns the UIDs of the running pods of namespace wired to the agent.
	wired(namespace string) []types.UID
}

func newBook(node string, w objectWriter, clk clock.WithTicker, log *slog.Logger) *book {
	return &book{
		node: node, writer: w, clock: clk, log: log, pace: defaultPacing, pods: noPods{},
		wake: make(chan struct{}, 1), reports: map[string]*nsReport{}, departed: map[types.UID]time.Time{},
	}
}

// noPods is the lookup of a book whose agent has no pod cache yet.
type noPods struct{}

func (noPods) revision(types.UID) string { return "" }
func (noPods) wired(string) []types.UID  { return nil }

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
		r = &nsReport{lines: map[types.UID]line{}, pairs: map[pair]int{}}
		b.reports[ns] = r
	}
	return r
}

// changed records a change of r not yet written. Caller holds mu.
func (b *book) changed(r *nsReport, c change) {
	c.since = b.clock.Now()
	r.pending = r.pending.merge(c)
	b.signal()
}

// agreed reports whether every pod of r that runs a breaker has its circuit in the same
// state as every other's (pacing.go: a burst is over). Caller holds mu.
func (r *nsReport) agreed() bool {
	state := map[string]string{}
	for _, l := range r.lines {
		for _, e := range l.entries {
			if s, ok := state[e.Name]; !ok {
				state[e.Name] = e.State
			} else if s != e.State {
				return false
			}
		}
	}
	return true
}

// entries is what r's lines add up to, as the object carries them. Caller holds mu.
func (b *book) entries(r *nsReport) []resiliencev1alpha1.NodeBreakerEntry {
	lines := make([]counting.PodLine, 0, len(r.lines))
	for uid, l := range r.lines {
		lines = append(lines, counting.PodLine{Name: l.pod, UID: uid, Revision: l.revision, Entries: l.entries})
	}
	return counting.Node(lines)
}

// matchesWritten reports whether what r adds up to is what the API server holds, and
// returns it. Caller holds mu.
func (b *book) matchesWritten(r *nsReport) ([]resiliencev1alpha1.NodeBreakerEntry, bool) {
	entries := b.entries(r)
	if len(entries) == 0 {
		return nil, !r.exists
	}
	if !r.exists || r.writtenOwner != b.owner {
		return entries, false
	}
	body, err := json.Marshal(entries)
	return entries, err == nil && bytes.Equal(body, r.written)
}

// put makes id's line say entries, which passed Validate. A resend of what the line says
// already changes nothing; a report with no entries takes the line out. It refuses (409)
// a pod or a breaker the object has no room for, and (403) a pod that has left the node.
func (b *book) put(id identity, entries []breakerconfig.ReportEntry) error {
	body, err := json.Marshal(entries)
	if err != nil {
		return err
	}
	rev := b.pods.revision(id.podUID)
	next := line{pod: id.pod, entries: entries, body: body, revision: rev}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, gone := b.departed[id.podUID]; gone {
		return refuse(http.StatusForbidden, "pod %s (uid %s) has left node %s", id, id.podUID, b.node)
	}
	if len(entries) == 0 {
		// An empty line: the pod has nothing to report, and a restarted agent need not wait
		// for it.
		r := b.report(id.namespace)
		old, had := r.lines[id.podUID]
		r.setLine(id.podUID, next)
		if had && len(old.entries) > 0 {
			b.changed(r, change{urgent: true})
		}
		return nil
	}
	r := b.report(id.namespace)
	old, had := r.lines[id.podUID]
	switch {
	case had && old.same(next) && old.revision == next.revision:
		return nil
	case !had && len(r.lines) >= resiliencev1alpha1.MaxNodePods:
		return refuse(http.StatusConflict, "node %s's report in namespace %s adds up %d pods, the most a NodeBreakerReport counts: pod %s's report is not carried", b.node, id.namespace, len(r.lines), id)
	}
	if n := r.pairsWith(old, next); n > resiliencev1alpha1.MaxNodeReportEntries {
		return refuse(http.StatusConflict, "with pod %s's report, node %s's report in namespace %s would hold %d entries (breakers × revisions), over the %d a NodeBreakerReport may", id, b.node, id.namespace, n, resiliencev1alpha1.MaxNodeReportEntries)
	}
	r.setLine(id.podUID, next)
	b.changed(r, classify(old.entries, entries))
	return nil
}

// setLine makes uid's line say l, keeping pairs. Caller holds mu.
func (r *nsReport) setLine(uid types.UID, l line) {
	r.dropLine(uid)
	r.lines[uid] = l
	for _, e := range l.entries {
		r.pairs[pair{e.Name, l.revision}]++
	}
}

// dropLine takes uid's line out, keeping pairs. Caller holds mu.
func (r *nsReport) dropLine(uid types.UID) {
	old, ok := r.lines[uid]
	if !ok {
		return
	}
	delete(r.lines, uid)
	for _, e := range old.entries {
		p := pair{e.Name, old.revision}
		if r.pairs[p]--; r.pairs[p] <= 0 {
			delete(r.pairs, p)
		}
	}
}

// pairsWith is how many entries (breaker and revision) r's object would hold with a pod's
// line old (the zero line: none) replaced by next. A line names each breaker once, so a
// line's pairs are distinct. Caller holds mu.
func (r *nsReport) pairsWith(old, next line) int {
	n := len(r.pairs)
	for _, e := range old.entries {
		if r.pairs[pair{e.Name, old.revision}] == 1 {
			n-- // carried by old alone
		}
	}
	for _, e := range next.entries {
		p := pair{e.Name, next.revision}
		others := r.pairs[p]
		if p.revision == old.revision && slices.ContainsFunc(old.entries, func(o breakerconfig.ReportEntry) bool { return o.Name == e.Name }) {
			others--
		}
		if others == 0 {
			n++
		}
	}
	return n
}

// classify says what replacing old entries with next is to the pacing (pacing.go):
// urgent when it brings news the fleet decides on, which is written in the next slot
// rather than held: an earned state (breakerconfig.Earned), a new config generation or
// refusal, a breaker leaving; moved when a circuit changed state or reason. What only
// says what the pod was told or what time did waits, as the pod's own reporter lets it
// wait (pkg/breaker/kube, earned.go).
func classify(old, next []breakerconfig.ReportEntry) change {
	var c change
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
				c.urgent = true
			}
		case o.State != e.State || o.Reason != e.Reason:
			c.moved = true
			if breakerconfig.Earned(e.State, e.Reason) {
				c.urgent = true
			}
		case o.ConfigGeneration != e.ConfigGeneration || o.ConfigError != e.ConfigError:
			c.urgent = true
		}
	}
	if len(was) > 0 {
		c.urgent = true
	}
	return c
}

// revisionChanged moves a pod's line to the revision the pod cache now has for it
// (relabelled, or cached after its first report), which changes the entry it counts in.
func (b *book) revisionChanged(ns string, uid types.UID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if r := b.reports[ns]; r != nil {
		if l, ok := r.lines[uid]; ok {
			if rev := b.pods.revision(uid); rev != l.revision {
				l.revision = rev
				r.setLine(uid, l)
				b.changed(r, change{})
			}
		}
	}
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
		r.dropLine(uid)
		b.changed(r, change{})
	}
}

// readBack takes the node's reports that the API server holds as written, and holds
// them (restartHold) until the pods wired to the agent have sent their reports again, so
// that a restarted agent writes nothing the pods' resent reports do not change.
func (b *book) readBack(ctx context.Context) error {
	list, err := b.writer.list(ctx, fields.OneTermEqualSelector("metadata.name", b.node).String())
	if err != nil {
		return fmt.Errorf("list this node's NodeBreakerReports: %w", err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	until := b.clock.Now().Add(restartHold)
	for i := range list {
		o := &list[i]
		if o.NodeName != b.node {
			continue
		}
		r := b.report(o.Namespace)
		r.exists, r.heldUntil = true, until
		if len(o.OwnerReferences) == 1 && o.OwnerReferences[0].Kind == "Node" {
			r.writtenOwner = o.OwnerReferences[0].UID
		}
		if r.written, err = json.Marshal(o.Breakers); err != nil {
			return err
		}
		b.changed(r, change{})
	}
	b.log.Info("Read back this node's reports", "namespaces", len(list))
	return nil
}

// held reports whether r, read back at a restart, waits for its pods' reports at now: until
// restartHold passes or every running pod wired to the agent in ns has reported. Caller
// holds mu.
func (b *book) held(ns string, r *nsReport, now time.Time) bool {
	if r.heldUntil.IsZero() {
		return false
	}
	if now.Before(r.heldUntil) {
		for _, uid := range b.pods.wired(ns) {
			if _, ok := r.lines[uid]; !ok {
				return true
			}
		}
	}
	r.heldUntil = time.Time{}
	return false
}
