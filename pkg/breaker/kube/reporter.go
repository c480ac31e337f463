package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// breakerReports is the resource the reporter writes: one object per pod.
var breakerReports = schema.GroupVersionResource{
	Group: breakerconfig.Group, Version: breakerconfig.Version, Resource: breakerconfig.ReportResource,
}

// Write retries: exponential, capped, so a pod that was cut off for a minute reports
// within a few seconds of the server's return without hammering it meanwhile. A report
// the server refuses is retried at the cap: the refusal may be lifted (a CRD upgraded, a
// policy fixed) and the report must not be lost.
const (
	minBackoff   = 100 * time.Millisecond
	maxBackoff   = 5 * time.Second
	writeTimeout = 10 * time.Second
	// maxConfigError leaves room under the schema's bound on configError.
	maxConfigError = breakerconfig.MaxConfigErrorSize - 24
)

// FieldManager is the server-side apply field manager of every pod's report.
const FieldManager = "fusebox-pod"

// member is what the pod says of one breaker, or of one breaker Group. It is comparable,
// so that "has the entry changed" is ==.
type member struct {
	state  breaker.State
	since  time.Time // UTC, cut to the millisecond: what the report keeps
	reason string
	// calls, failures and slow at the transition into state; calls 0 leaves the rates out.
	calls, failures, slow int64
	// slowJudged: the policy judges slow calls, so the slow-call rate is written.
	slowJudged bool
	trigger    string // breakerconfig.Trigger*, for a circuit its calls opened
	// The open period entered (or, half-open, the one just ended); 0 when closed.
	consecutiveOpens int32
	openTimeout      time.Duration
	generation       int64
	configErr        string
	// For a Group: its summary. worst holds the first nWorst keys.
	group                bool
	keys, open, halfOpen int32
	nWorst               int
	worst                [breakerconfig.MaxWorstKeys]string
}

// entry is what the reporter knows about one breaker of this pod.
type entry struct {
	// period is the last Transition.Period applied; deliveries from different goroutines
	// may arrive out of order, and an older one must not overwrite a newer state.
	period uint64
	known  bool // want.state, want.since and want.reason are set
	// reported: the breaker is published and the first config sync is done, so it is in
	// the report. Until then transitions are only recorded.
	reported bool
	want     member
	// group is the breaker Group the entry reports, nil for a breaker. A Group's entry is
	// computed from its summary when the report is written, not from transitions.
	group *breaker.Group
}

// reporter writes this pod's BreakerReport. It is a [breaker.Observer] on every breaker of
// the registry: OnTransition only records the wanted entry and wakes the single writer
// goroutine, so a call that causes a transition never waits on the network. The writer
// coalesces: it applies the whole report as it stands, however many transitions came
// before, and writes nothing while the report is what the API server already holds.
type reporter struct {
	reports   dynamic.NamespaceableResourceInterface
	pods      kubernetes.Interface // reads the Pod's UID when podUID is not given
	namespace string
	pod       string
	log       *slog.Logger

	wake chan struct{} // 1-buffered: one pending wake-up is enough, the writer reads the latest

	mu      sync.Mutex
	entries map[string]*entry // guarded by mu
	podUID  types.UID         // guarded by mu; empty until known
	written []member          // guarded by mu: the report the API server holds, by name
	names   []string          // guarded by mu: the names of written, in order
	synced  bool              // guarded by mu: written is what the API server holds

	writes, failures, rejected atomic.Int64
	lastErr                    atomic.Pointer[string]
}

var _ breaker.Observer = (*reporter)(nil)

func newReporter(dc dynamic.Interface, cs kubernetes.Interface, namespace, pod string, podUID types.UID, log *slog.Logger) *reporter {
	return &reporter{
		reports:   dc.Resource(breakerReports),
		pods:      cs,
		namespace: namespace,
		pod:       pod,
		podUID:    podUID,
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

// signal wakes the writer. Caller holds mu.
func (r *reporter) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// OnTransition records the breaker's new state as the entry to write. It never blocks. A
// transition of a Group's member ("<group>/<key>") only wakes the writer, which reads the
// Group's summary: the report carries one entry per Group, not one per key.
func (r *reporter) OnTransition(t breaker.Transition) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if group, _, ok := breaker.SplitKeyName(t.Breaker); ok {
		if e, ok := r.entries[group]; ok && e.group != nil && e.reported {
			r.signal()
		}
		return
	}
	e := r.entry(t.Breaker)
	if t.Period <= e.period {
		return // an older delivery that lost the race to a newer one
	}
	e.period = t.Period
	e.known = true
	e.want.setTransition(t)
	if e.reported {
		r.signal()
	}
}

// setTransition makes m say what t says: the state reached, when and why, and the figures
// behind it.
func (m *member) setTransition(t breaker.Transition) {
	m.state = t.To
	m.since = wireTime(t.At)
	m.reason = reasonOf(t)
	m.calls, m.failures, m.slow = t.Counts.Calls, t.Counts.Failures, t.Counts.Slow
	if t.Cause == breaker.CauseAdopted {
		// An adopted verdict was reached on another pod's evidence: this pod's own window
		// says nothing about it, and a rate next to the state would read as the reason.
		m.calls, m.failures, m.slow = 0, 0, 0
	}
	m.trigger = triggerOf(t)
	m.consecutiveOpens, m.openTimeout = 0, 0
	if t.To != breaker.Closed {
		m.consecutiveOpens, m.openTimeout = int32(min(t.ConsecutiveOpens, math.MaxInt32)), t.OpenTimeout
	}
}

// triggerOf says which judgement of calls opened the circuit, as the report spells it: for
// a circuit its calls opened (reasons Tripped and ProbeFailed), else "".
func triggerOf(t breaker.Transition) string {
	if t.Cause != breaker.CauseCalls || t.To != breaker.Open {
		return ""
	}
	switch t.Trigger {
	case breaker.TriggerFailureRate:
		return breakerconfig.TriggerFailureRate
	case breaker.TriggerSlowCallRate:
		return breakerconfig.TriggerSlowCallRate
	case breaker.TriggerFailedProbe:
		return breakerconfig.TriggerFailedProbe
	case breaker.TriggerSlowProbe:
		return breakerconfig.TriggerSlowProbe
	}
	return ""
}

// reasonOf says how a transition reached its state, as the report spells it. Only the
// pod's own judgement is an earned reason (DESIGN §5.12): the calls that opened it, Trip,
// a failed probe, probes that closed it.
func reasonOf(t breaker.Transition) string {
	switch t.Cause {
	case breaker.CauseCalls:
		switch {
		case t.To == breaker.Open && t.From == breaker.HalfOpen:
			return breakerconfig.ReasonProbeFailed
		case t.To == breaker.Open:
			return breakerconfig.ReasonTripped
		case t.To == breaker.Closed && t.From == breaker.HalfOpen:
			return breakerconfig.ReasonProbesSucceeded
		}
	case breaker.CauseTrip:
		return breakerconfig.ReasonManual
	case breaker.CauseTimeout:
		return breakerconfig.ReasonTimedOut
	case breaker.CauseAdopted:
		return breakerconfig.ReasonAdopted
	case breaker.CauseMode:
		return breakerconfig.ReasonForced
	}
	// A transition the core may add later is not evidence until it is named above.
	return breakerconfig.ReasonTimedOut
}

// configure puts b in the report with the given config generation and refusal, and makes
// sure its entry has a state: a breaker that never moved has had no transition to report
// one. It does not wake the writer: the applier configures every breaker a config names,
// then calls flush once, so that one config is one write however many breakers it names.
// It must be called without r.mu held, and without any lock OnTransition's callers might
// hold.
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
	p := b.Policy()
	forced := p.Mode == breaker.ModeForcedOpen

	r.mu.Lock()
	defer r.mu.Unlock()
	e.want.slowJudged = p.SlowCallDuration > 0
	// A transition delivered meanwhile is newer than v; and a state that differs from v
	// with no delivery yet is a transition still on its way, which will bring its own.
	if e.period == period && (!e.known || e.want.state == v.State) {
		if !e.known {
			e.want.calls, e.want.failures, e.want.slow, e.want.trigger = 0, 0, 0, ""
			e.want.reason = breakerconfig.ReasonStarted
			if forced {
				e.want.reason = breakerconfig.ReasonForced
			}
		}
		// The open period too: an adopted Open verdict may re-time the one running.
		// Half-open, Verdict leaves OpenTimeout out, which the transition carried.
		if !e.known || v.State == breaker.Open {
			e.want.consecutiveOpens, e.want.openTimeout = int32(min(v.ConsecutiveOpens, math.MaxInt32)), v.OpenTimeout
		}
		e.known = true
		e.want.state = v.State
		e.want.since = wireTime(v.Since)
	}
}

// configureGroup puts the Group g in the report, as configure does a breaker. Its entry's
// state and figures come from its summary each time the report is written.
func (r *reporter) configureGroup(g *breaker.Group, generation int64, configErr string) {
	judged := g.Policy().SlowCallDuration > 0
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.entry(g.Name())
	e.reported, e.known, e.group = true, true, g
	e.want.generation = generation
	e.want.configErr = truncate(configErr, maxConfigError)
	e.want.slowJudged = judged
}

// setSummary makes m say what a Group's summary says. The Group is Open while any key is,
// else HalfOpen while any key is, else Closed; since, reason and figures are those of the
// member transition that brought it there, or Started (Forced, for a forced-open
// member created so) when none did.
func (m *member) setSummary(s breaker.GroupSummary, forced bool) {
	if s.Reached.Breaker != "" {
		m.setTransition(s.Reached)
	} else {
		m.calls, m.failures, m.slow, m.trigger = 0, 0, 0, ""
		m.consecutiveOpens, m.openTimeout = 0, 0
		m.reason = breakerconfig.ReasonStarted
		if forced {
			m.reason = breakerconfig.ReasonForced
		}
	}
	m.state, m.since = s.State, wireTime(s.Since)
	m.group = true
	m.keys, m.open, m.halfOpen = clamp32(s.Keys), clamp32(s.Open), clamp32(s.HalfOpen)
	m.worst = [breakerconfig.MaxWorstKeys]string{}
	m.nWorst = min(len(s.Worst), breakerconfig.MaxWorstKeys)
	for i := range m.nWorst {
		m.worst[i] = truncate(s.Worst[i], maxWorstKey)
	}
}

// maxWorstKey leaves room under the schema's bound (253 characters) on a key in worst.
const maxWorstKey = 250

func clamp32(n int) int32 { return int32(min(n, math.MaxInt32)) }

// unconfigure takes name out of the report (its CircuitBreaker is gone from the
// ConfigMap). If it comes back, its entry is written afresh. Like configure, it leaves
// waking the writer to flush.
func (r *reporter) unconfigure(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.entries[name]; ok {
		e.reported = false
	}
}

// flush wakes the writer after configure and unconfigure calls; it writes only if the
// report changed.
func (r *reporter) flush() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.signal()
}

// pending returns the report to write, in name order, and false when the API server
// already holds it, or when nothing was ever written and there is nothing to write.
func (r *reporter) pending() (names []string, ms []member, dirty bool) {
	r.refreshGroups()
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, e := range r.entries {
		if e.reported && e.known {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	ms = make([]member, len(names))
	for i, name := range names {
		ms[i] = r.entries[name].want
	}
	if !r.synced {
		// Nothing written yet: a pod that reports no breaker has no report to write.
		return names, ms, len(names) > 0
	}
	dirty = !slices.Equal(names, r.names) || !slices.Equal(ms, r.written)
	return names, ms, dirty
}

// refreshGroups brings the entries of Groups up to date with their summaries. Summary
// may deliver transitions to OnTransition, so it runs without r.mu.
func (r *reporter) refreshGroups() {
	r.mu.Lock()
	var gs []*breaker.Group
	for _, e := range r.entries {
		if e.group != nil && e.reported {
			gs = append(gs, e.group)
		}
	}
	r.mu.Unlock()
	if len(gs) == 0 {
		return
	}
	type summary struct {
		s      breaker.GroupSummary
		forced bool
	}
	sums := make(map[string]summary, len(gs))
	for _, g := range gs {
		sums[g.Name()] = summary{g.Summary(), g.Policy().Mode == breaker.ModeForcedOpen}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, s := range sums {
		if e := r.entries[name]; e != nil && e.group != nil {
			e.want.setSummary(s.s, s.forced)
		}
	}
}

// markWritten records that the API server holds the report of names and ms.
func (r *reporter) markWritten(names []string, ms []member) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.names, r.written, r.synced = names, ms, true
}

// run is the writer: it waits to be woken, writes the report if it changed, and on
// failure backs off and tries again with whatever the entries hold by then. It returns
// when ctx ends.
func (r *reporter) run(ctx context.Context) {
	backoff := minBackoff
	var failing string // the error of the current run of failures, logged once
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		}
		for {
			names, ms, dirty := r.pending()
			if !dirty {
				break
			}
			err := r.write(ctx, names, ms)
			if ctx.Err() != nil {
				return
			}
			if err == nil {
				r.writes.Add(1)
				r.lastErr.Store(nil)
				r.markWritten(names, ms)
				if failing != "" {
					r.log.Info("Breaker report written again after failures", "report", r.pod)
					failing = ""
				}
				backoff = minBackoff
				continue
			}
			r.failures.Add(1)
			msg := err.Error()
			r.lastErr.Store(&msg)
			refused := refusal(err)
			if refused {
				r.rejected.Add(1)
			}
			if msg != failing {
				// Once per distinct error, not once per retry.
				if refused {
					r.log.Error("The API server refused this pod's breaker report; retrying with backoff", "report", r.pod, "error", err)
				} else {
					r.log.Warn("Cannot write this pod's breaker report; retrying with backoff", "report", r.pod, "error", err)
				}
				failing = msg
			}
			if refused {
				backoff = maxBackoff
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

// refusal reports whether err is the API server refusing the report itself (its schema,
// the admission policy, RBAC, no such resource), rather than being unreachable or busy.
func refusal(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || apierrors.IsForbidden(err) ||
		apierrors.IsNotFound(err) || apierrors.IsUnauthorized(err)
}

// write applies the whole report: the entries of names, owned by this pod's Pod. One
// field manager owns every entry, so server-side apply removes the entries and fields the
// pod no longer sets (a breaker no longer published, a cleared configError).
func (r *reporter) write(ctx context.Context, names []string, ms []member) error {
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	uid, err := r.ownerUID(ctx)
	if err != nil {
		return err
	}
	body, err := json.Marshal(r.reportObject(uid, names, ms))
	if err != nil {
		return err
	}
	force := true
	_, err = r.reports.Namespace(r.namespace).Patch(ctx, r.pod, types.ApplyPatchType, body, metav1.PatchOptions{
		FieldManager: FieldManager,
		Force:        &force,
	})
	return err
}

// ownerUID returns the UID of this pod's Pod: given in Options, or read once.
func (r *reporter) ownerUID(ctx context.Context) (types.UID, error) {
	r.mu.Lock()
	uid := r.podUID
	r.mu.Unlock()
	if uid != "" {
		return uid, nil
	}
	pod, err := r.pods.CoreV1().Pods(r.namespace).Get(ctx, r.pod, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("read Pod %s/%s for the UID its report is owned by (set %s to skip this): %w", r.namespace, r.pod, EnvPodUID, err)
	}
	r.mu.Lock()
	r.podUID = pod.UID
	r.mu.Unlock()
	return pod.UID, nil
}

// report is the applied object: a BreakerReport as the pod writes it.
type report struct {
	APIVersion string                      `json:"apiVersion"`
	Kind       string                      `json:"kind"`
	Metadata   reportMeta                  `json:"metadata"`
	Breakers   []breakerconfig.ReportEntry `json:"breakers"`
}

type reportMeta struct {
	Name            string                  `json:"name"`
	Namespace       string                  `json:"namespace"`
	OwnerReferences []metav1.OwnerReference `json:"ownerReferences"`
}

func (r *reporter) reportObject(uid types.UID, names []string, ms []member) report {
	rep := report{
		APIVersion: breakerReports.GroupVersion().String(),
		Kind:       breakerconfig.ReportKind,
		Metadata: reportMeta{
			Name:      r.pod,
			Namespace: r.namespace,
			// The garbage collector deletes the report with its pod; the admission policy
			// checks that a pod names itself here.
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: r.pod, UID: uid}},
		},
		Breakers: make([]breakerconfig.ReportEntry, len(names)),
	}
	for i, name := range names {
		rep.Breakers[i] = reportEntry(name, ms[i])
	}
	return rep
}

// reportEntry is m as the report spells it.
func reportEntry(name string, m member) breakerconfig.ReportEntry {
	e := breakerconfig.ReportEntry{
		Name:             name,
		State:            wireState(m.state),
		Since:            breakerconfig.NewTime(m.since),
		Reason:           m.reason,
		ConfigGeneration: m.generation,
		ConfigError:      m.configErr,
	}
	if m.calls > 0 {
		calls := m.calls
		e.Calls, e.FailureRatePercent = &calls, percent(m.failures, m.calls)
		if m.slowJudged {
			e.SlowCallRatePercent = percent(m.slow, m.calls)
		}
	}
	e.Trigger = m.trigger
	if m.consecutiveOpens > 0 {
		e.ConsecutiveOpens = m.consecutiveOpens
		if m.openTimeout > 0 {
			d := breakerconfig.Duration(m.openTimeout)
			e.OpenTimeout = &d
		}
	}
	if m.group {
		e.Keys = &breakerconfig.KeySummary{Keys: m.keys, Open: m.open, HalfOpen: m.halfOpen}
		if m.nWorst > 0 {
			e.Keys.Worst = slices.Clone(m.worst[:m.nWorst])
		}
	}
	return e
}

// percent is n of total in whole percent, rounded.
func percent(n, total int64) *int32 {
	rate := int32(math.Round(100 * float64(min(n, total)) / float64(total)))
	return &rate
}

func wireState(s breaker.State) string {
	switch s {
	case breaker.Open:
		return breakerconfig.StateOpen
	case breaker.HalfOpen:
		return breakerconfig.StateHalfOpen
	}
	return breakerconfig.StateClosed
}

// wireTime is t as the report carries it: to the millisecond.
func wireTime(t time.Time) time.Time { return breakerconfig.NewTime(t).Time }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// lastError returns the last write error, or "".
func (r *reporter) lastError() string {
	if p := r.lastErr.Load(); p != nil {
		return *p
	}
	return ""
}
