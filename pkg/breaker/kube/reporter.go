package kube

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker"
)

// circuitBreakers is the resource the reporter writes to.
var circuitBreakers = resiliencev1alpha1.GroupVersion.WithResource("circuitbreakers")

// Write retries while the API server is away: exponential, capped, so a pod that was cut
// off for a minute reports within a few seconds of the server's return without hammering
// it meanwhile.
const (
	minBackoff   = 100 * time.Millisecond
	maxBackoff   = 5 * time.Second
	writeTimeout = 10 * time.Second
	// maxConfigError leaves room under the CRD's 1024-character bound on configError.
	maxConfigError = 1000
)

// member is the content of one pod's entry in status.members. It is comparable, so that
// "has the entry changed" is ==.
type member struct {
	state breaker.State
	since time.Time // UTC, truncated to the second: what RFC 3339 in the status keeps
	// calls and failures at the transition into state; calls 0 leaves both out.
	calls, failures int64
	generation      int64
	configErr       string
}

// entry is what the reporter knows about one breaker of this pod.
type entry struct {
	// period is the last Transition.Period applied; deliveries from different goroutines
	// may arrive out of order, and an older one must not overwrite a newer state.
	period uint64
	known  bool // want.state and want.since are set (from a transition or a Verdict)
	// reported: the breaker is configured and the first config sync is done, so its entry
	// is written. Until then transitions are only recorded.
	reported bool
	want     member
	written  member
	// hasWritten says written holds what the API server has (or what a 404 dropped).
	hasWritten bool
}

func (e *entry) dirty() bool { return e.reported && e.known && (!e.hasWritten || e.want != e.written) }

// reporter writes this pod's member entries by server-side apply. It is a
// [breaker.Observer] on every breaker of the registry: OnTransition only records the
// wanted entry and wakes the single writer goroutine, so a call that causes a transition
// never waits on the network. The writer coalesces: what it writes is the latest entry of
// each breaker, however many transitions came before.
type reporter struct {
	client    dynamic.NamespaceableResourceInterface
	namespace string
	pod       string
	log       *slog.Logger

	wake chan struct{} // 1-buffered: one pending wake-up is enough, the writer reads the latest

	mu      sync.Mutex
	entries map[string]*entry // guarded by mu

	writes, failures, dropped atomic.Int64
}

var _ breaker.Observer = (*reporter)(nil)

func newReporter(client dynamic.Interface, namespace, pod string, log *slog.Logger) *reporter {
	return &reporter{
		client:    client.Resource(circuitBreakers),
		namespace: namespace,
		pod:       pod,
		log:       log,
		wake:      make(chan struct{}, 1),
		entries:   map[string]*entry{},
	}
}

// entry returns the entry of name, creating it. Caller holds mu.
func (r *reporter) entry(name string) *entry {
	e, ok := r.entries[name]
	if !ok {
		e = &entry{}
		r.entries[name] = e
	}
	return e
}

// signal wakes the writer if e needs writing. Caller holds mu.
func (r *reporter) signal(e *entry) {
	if !e.dirty() {
		return
	}
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// OnTransition records the breaker's new state as the entry to write. It never blocks.
func (r *reporter) OnTransition(t breaker.Transition) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.entry(t.Breaker)
	if t.Period <= e.period {
		return // an older delivery that lost the race to a newer one
	}
	e.period = t.Period
	e.known = true
	e.want.state = t.To
	e.want.since = wireTime(t.At)
	e.want.calls, e.want.failures = t.Counts.Calls, t.Counts.Failures
	if t.Cause == breaker.CauseAdopted {
		// An adopted verdict was reached on another pod's evidence: this pod's own window
		// says nothing about it, and a rate next to the state would read as the reason.
		e.want.calls, e.want.failures = 0, 0
	}
	r.signal(e)
}

// configure marks b as configured with the given config generation and refusal, so that
// its entry is written, and makes sure the entry has a state: a breaker that never moved
// has had no transition to report one. It must be called without r.mu held, and without
// any lock OnTransition's callers might hold.
func (r *reporter) configure(b *breaker.Breaker, generation int64, configErr string) {
	r.mu.Lock()
	e := r.entry(b.Name())
	e.reported = true
	e.want.generation = generation
	e.want.configErr = truncate(configErr, maxConfigError)
	period := e.period
	r.mu.Unlock()

	// Verdict, outside the lock since it may deliver a transition (open → half-open) to
	// OnTransition. It also catches the one change of "since" that comes with no
	// transition: Adopt of an Open verdict on a circuit already open moves its start.
	v := b.Verdict()

	r.mu.Lock()
	defer r.mu.Unlock()
	// A transition delivered meanwhile is newer than v; and a state that differs from v
	// with no delivery yet is a transition still on its way, which will bring its own.
	if e.period == period && (!e.known || e.want.state == v.State) {
		if !e.known {
			e.want.calls, e.want.failures = 0, 0
		}
		e.known = true
		e.want.state = v.State
		e.want.since = wireTime(v.Since)
	}
	r.signal(e)
}

// unconfigure stops writing name's entry (its CircuitBreaker is gone from the ConfigMap).
// If it comes back, its entry is written afresh.
func (r *reporter) unconfigure(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.entries[name]; ok {
		e.reported = false
		e.hasWritten = false
	}
}

type pendingWrite struct {
	name string
	m    member
}

// pending returns the entries to write, in name order.
func (r *reporter) pending() []pendingWrite {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []pendingWrite
	for name, e := range r.entries {
		if e.dirty() {
			out = append(out, pendingWrite{name, e.want})
		}
	}
	slices.SortFunc(out, func(a, b pendingWrite) int {
		switch {
		case a.name < b.name:
			return -1
		case a.name > b.name:
			return 1
		}
		return 0
	})
	return out
}

// written records that m is what the API server holds for name (or that it was dropped).
func (r *reporter) markWritten(name string, m member) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.entries[name]; ok && e.reported {
		e.written, e.hasWritten = m, true
	}
}

// run is the writer: it waits to be woken, writes every dirty entry, and on failure backs
// off and tries again with whatever the entries hold by then. It returns when ctx ends.
func (r *reporter) run(ctx context.Context) {
	backoff := minBackoff
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		}
		for {
			batch := r.pending()
			if len(batch) == 0 {
				break
			}
			var lastErr error
			for _, w := range batch {
				err := r.write(ctx, w.name, w.m)
				switch {
				case err == nil:
					r.writes.Add(1)
					r.markWritten(w.name, w.m)
				case ctx.Err() != nil:
					return
				case apierrors.IsNotFound(err):
					// No CircuitBreaker to write to (deleted, or not created yet): drop the
					// entry. A later change of the breaker writes it again.
					r.dropped.Add(1)
					r.markWritten(w.name, w.m)
					r.log.Info("No CircuitBreaker for this breaker; status report dropped", "breaker", w.name)
				case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
					// Retrying the same body cannot succeed.
					r.dropped.Add(1)
					r.markWritten(w.name, w.m)
					r.log.Error("Status report refused by the API server; dropped", "breaker", w.name, "error", err)
				default:
					r.failures.Add(1)
					lastErr = err
				}
			}
			if lastErr == nil {
				if failing {
					r.log.Info("Status reporting resumed")
					failing = false
				}
				backoff = minBackoff
				continue
			}
			if !failing {
				// Once per outage, not once per retry.
				r.log.Warn("Cannot report breaker state; retrying with backoff", "error", lastErr)
				failing = true
			}
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(2*backoff, maxBackoff)
		}
	}
}

// write applies this pod's entry of the CircuitBreaker named name. The body holds only that
// entry, and the field manager is the pod's own, so server-side apply leaves every other
// pod's entry alone and removes fields this pod no longer sets (a cleared configError).
func (r *reporter) write(ctx context.Context, name string, m member) error {
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	obj, err := r.applyObject(name, m)
	if err != nil {
		return err
	}
	_, err = r.client.Namespace(r.namespace).ApplyStatus(ctx, name, obj, metav1.ApplyOptions{
		FieldManager: fieldManager(r.pod),
		Force:        true,
	})
	return err
}

// FieldManagerPrefix starts the server-side apply field manager of every pod's reports;
// the pod's name follows it.
const FieldManagerPrefix = "fusebox-pod-"

// maxFieldManager is the API server's limit on a field manager's length.
const maxFieldManager = 128

// fieldManager is the pod's field manager: the prefix and the pod's name, which a pod name
// longer than usual (up to 253 characters) would push past the API server's limit; such a
// name is cut and ends with a hash of the whole, to stay unique.
func fieldManager(pod string) string {
	m := FieldManagerPrefix + pod
	if len(m) <= maxFieldManager {
		return m
	}
	h := fnv.New32a()
	h.Write([]byte(pod))
	suffix := fmt.Sprintf("-%08x", h.Sum32())
	return m[:maxFieldManager-len(suffix)] + suffix
}

func (r *reporter) applyObject(name string, m member) (*unstructured.Unstructured, error) {
	entry, err := runtime.DefaultUnstructuredConverter.ToUnstructured(memberStatus(r.pod, m))
	if err != nil {
		return nil, err
	}
	entry["since"] = m.since.UTC().Format(wireTimeFormat)
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": resiliencev1alpha1.GroupVersion.String(),
		"kind":       "CircuitBreaker",
		"metadata":   map[string]any{"name": name, "namespace": r.namespace},
		"status":     map[string]any{"members": []any{entry}},
	}}, nil
}

// memberStatus is m as the CircuitBreaker's status spells it.
func memberStatus(pod string, m member) *resiliencev1alpha1.MemberStatus {
	ms := &resiliencev1alpha1.MemberStatus{
		Pod:              pod,
		State:            wireState(m.state),
		Since:            metav1.NewTime(m.since),
		ConfigGeneration: m.generation,
		ConfigError:      m.configErr,
	}
	if m.calls > 0 {
		calls := m.calls
		rate := int32(math.Round(100 * float64(min(m.failures, m.calls)) / float64(m.calls)))
		ms.Calls, ms.FailureRatePercent = &calls, &rate
	}
	return ms
}

func wireState(s breaker.State) resiliencev1alpha1.State {
	switch s {
	case breaker.Open:
		return resiliencev1alpha1.StateOpen
	case breaker.HalfOpen:
		return resiliencev1alpha1.StateHalfOpen
	}
	return resiliencev1alpha1.StateClosed
}

// wireTime is t as the status carries it: to the millisecond. metav1.Time would
// write whole seconds, which would move a fleet's shared open period up to a
// second earlier on every pod that adopts it; MemberStatus.since is written
// with milliseconds (see applyObject) and the operator reads them back.
func wireTime(t time.Time) time.Time { return t.UTC().Truncate(time.Millisecond) }

// wireTimeFormat writes milliseconds always, so equal times are equal strings.
const wireTimeFormat = "2006-01-02T15:04:05.000Z07:00"

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
