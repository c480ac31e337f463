package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// recorder is an objectWriter that keeps what the writer would have sent.
type recorder struct {
	mu     sync.Mutex
	writes []written
	fail   error // returned by every write while set
}

type written struct {
	namespace string
	pods      int // the pods the object counts (every test pod reports one breaker); -1 for a delete
	obj       *resiliencev1alpha1.NodeBreakerReport
}

func (r *recorder) write(_ context.Context, obj *resiliencev1alpha1.NodeBreakerReport) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return r.fail
	}
	pods := 0
	for _, e := range obj.Breakers {
		pods += int(e.Pods)
	}
	r.writes = append(r.writes, written{namespace: obj.Namespace, pods: pods, obj: obj})
	return nil
}

func (r *recorder) remove(_ context.Context, ns string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return r.fail
	}
	r.writes = append(r.writes, written{namespace: ns, pods: -1})
	return nil
}

func (r *recorder) list(context.Context, string) ([]resiliencev1alpha1.NodeBreakerReport, error) {
	return nil, nil
}

// take returns the writes recorded since the last take.
func (r *recorder) take() []written {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.writes
	r.writes = nil
	return w
}

// pacer drives a book's writer by hand on a fake clock: each step takes what is due now
// and writes it at once, so a test sees exactly which writes each moment allows.
type pacer struct {
	t     *testing.T
	clock *testingclock.FakeClock
	book  *book
	rec   *recorder
}

func newPacer(t *testing.T) *pacer {
	clk := testingclock.NewFakeClock(time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC))
	rec := &recorder{}
	b := newBook("node-a", rec, clk, slog.New(slog.DiscardHandler))
	b.setOwner("node-a-uid")
	return &pacer{t: t, clock: clk, book: b, rec: rec}
}

// step moves the clock by d and runs the writer once; it returns what was written and
// when the writer would look next (zero: nothing pending).
func (p *pacer) step(d time.Duration) ([]written, time.Time) {
	p.clock.Step(d)
	for {
		// As the writer's loop does: a finished write wakes it to take again.
		jobs, next := p.book.take(p.clock.Now())
		if len(jobs) == 0 {
			return p.rec.take(), next
		}
		for _, j := range jobs {
			p.book.write(context.Background(), j)
		}
	}
}

func (p *pacer) put(ns, pod string, entries ...breakerconfig.ReportEntry) {
	p.t.Helper()
	if err := p.book.put(identity{namespace: ns, pod: pod, podUID: types.UID(pod + "-uid"), node: "node-a"}, entries); err != nil {
		p.t.Fatal(err)
	}
}

func entry(name, state, reason string) breakerconfig.ReportEntry {
	return breakerconfig.ReportEntry{Name: name, State: state, Reason: reason,
		Since: breakerconfig.NewTime(time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)), ConfigGeneration: 1}
}

var (
	tripped = entry("payments", breakerconfig.StateOpen, breakerconfig.ReasonTripped)
	adopted = entry("payments", breakerconfig.StateOpen, breakerconfig.ReasonAdopted)
	started = entry("payments", breakerconfig.StateClosed, breakerconfig.ReasonStarted)
)

// wantWrites checks the writes got by the pods each object counts, in order.
func wantWrites(t *testing.T, at string, got []written, want ...int) {
	t.Helper()
	var pods []int
	for _, w := range got {
		pods = append(pods, w.pods)
	}
	if !slices.Equal(pods, want) {
		t.Errorf("%s: wrote objects counting %v pods, want %v", at, pods, want)
	}
}

// payments is a written object's entry of breaker payments (every test pod has no
// revision), or an empty one.
func payments(w written) resiliencev1alpha1.NodeBreakerEntry {
	if e := entryOf(w.obj, "payments", ""); e != nil {
		return *e
	}
	return resiliencev1alpha1.NodeBreakerEntry{}
}

// TestPacing: on a fake clock, the writes one object gets: the pods' first words after a
// hold of 500 ms; the first earned change after a quiet spell 200 ms after it came, with
// what came meanwhile; the rest of that burst (later trips, the echoes of the verdict)
// in one write as soon as the node's pods agree, or 3 s after the first of it if they
// do not; other unearned changes after their hold, or with an earned one; nothing for a
// resend of what the object says, or for changes that undo each other.
func TestPacing(t *testing.T) {
	if defaultPacing.gather != 200*time.Millisecond || defaultPacing.hold != 500*time.Millisecond || defaultPacing.settle != 3*time.Second {
		t.Fatalf("this test is written for a gather of 200 ms, a hold of 500 ms and a settle of 3 s, not %+v", defaultPacing)
	}
	p := newPacer(t)
	pods := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	for _, pod := range pods {
		p.put("shop", pod, started)
	}
	w, _ := p.step(499 * time.Millisecond)
	wantWrites(t, "499 ms after the pods' first words", w)
	w, _ = p.step(time.Millisecond)
	wantWrites(t, "the first words' hold", w, 8)

	// An incident: the first trips after a quiet spell go after the gather.
	p.step(10 * time.Second)
	p.put("shop", "a", tripped)
	w, _ = p.step(120 * time.Millisecond)
	wantWrites(t, "120 ms after an earned change after a quiet spell", w)
	p.put("shop", "b", tripped)
	w, _ = p.step(79 * time.Millisecond)
	wantWrites(t, "199 ms after an earned change after a quiet spell", w)
	w, _ = p.step(time.Millisecond)
	wantWrites(t, "200 ms after an earned change after a quiet spell", w, 8)
	if len(w) == 1 && payments(w[0]).EarnedOpen != 2 {
		t.Errorf("the first write: %+v, want both earned Opens", payments(w[0]))
	}

	// The rest of the burst, later trips and then the echoes of the fleet's verdict, waits
	// until the node's pods agree, however long the echoes take (here 1.2 s, over twice
	// the hold), and goes in one write the moment the last pod has taken the verdict.
	for i, pod := range []string{"c", "d"} {
		w, _ := p.step(50 * time.Millisecond)
		p.put("shop", pod, tripped)
		_, next := p.step(0)
		wantWrites(t, fmt.Sprintf("%d ms after the first write", 50*(i+1)), w)
		if want := p.clock.Now().Add(time.Duration(3000-50*i) * time.Millisecond); !next.Equal(want) {
			t.Errorf("%d ms after the first write, the writer looks again at %v, want %v (3 s after the first late trip)", 50*(i+1), next.Format(time.StampMilli), want.Format(time.StampMilli))
		}
	}
	for i, pod := range []string{"e", "f", "g"} {
		w, _ := p.step(300 * time.Millisecond)
		p.put("shop", pod, adopted)
		wantWrites(t, fmt.Sprintf("echo %d of 4, %d ms after the first write", i+1, 100+300*(i+1)), w)
	}
	w, _ = p.step(300 * time.Millisecond)
	wantWrites(t, "1.3 s after the first write, one pod still closed", w)
	p.put("shop", "h", adopted)
	w, _ = p.step(0)
	wantWrites(t, "the last echo: every pod open", w, 8)
	if len(w) == 1 && (payments(w[0]).EarnedOpen != 4 || payments(w[0]).HoldingVerdict != 4 || payments(w[0]).Open != 8) {
		t.Errorf("the burst's write: %+v, want 4 earned Opens and 4 pods holding the verdict", payments(w[0]))
	}

	// Pods that do not come to agree are written 3 s after the first of their moves.
	p.step(10 * time.Second)
	p.put("shop", "e", entry("payments", breakerconfig.StateClosed, breakerconfig.ReasonAdopted))
	w, _ = p.step(2999 * time.Millisecond)
	wantWrites(t, "2.999 s after a move the other pods do not follow", w)
	w, _ = p.step(time.Millisecond)
	wantWrites(t, "3 s after a move the other pods do not follow", w, 8)

	// A change that moves no circuit (a pod's first word) waits its hold, 500 ms from the
	// first of them, however quiet it has been.
	p.step(10 * time.Second)
	p.put("shop", "i", started)
	w, _ = p.step(0)
	wantWrites(t, "a first word at once", w)
	w, _ = p.step(499 * time.Millisecond)
	wantWrites(t, "499 ms into the hold", w)
	w, _ = p.step(time.Millisecond)
	wantWrites(t, "the hold's end", w, 9)

	// An earned change takes the held ones with it.
	p.step(10 * time.Second)
	p.put("shop", "j", started)
	p.step(100 * time.Millisecond)
	p.put("shop", "e", entry("payments", breakerconfig.StateClosed, breakerconfig.ReasonProbesSucceeded))
	w, next := p.step(100 * time.Millisecond) // the gather, from the first change pending
	if len(w) != 1 || w[0].pods != 10 || payments(w[0]).EarnedClosed != 1 || payments(w[0]).Closed != 3 {
		t.Errorf("an earned change during a hold: wrote %+v, want one write with both", w)
	}
	if !next.IsZero() {
		t.Errorf("the held change still pending after it was written (looks at %v)", next)
	}

	// A resend of what the object says writes nothing, nor do changes that undo each
	// other before they are due.
	p.step(10 * time.Second)
	p.put("shop", "e", entry("payments", breakerconfig.StateClosed, breakerconfig.ReasonProbesSucceeded))
	w, next = p.step(0)
	wantWrites(t, "an unchanged resend", w)
	if !next.IsZero() {
		t.Errorf("an unchanged resend left something pending (looks at %v)", next)
	}
	p.put("shop", "a", adopted)
	p.step(250 * time.Millisecond)
	p.put("shop", "a", tripped)
	w, next = p.step(2 * time.Second)
	wantWrites(t, "a change undone", w)
	if !next.IsZero() || !p.book.idle() {
		t.Errorf("a change undone is still pending (looks at %v)", next)
	}
}

// TestPacingPerObject: the pace is per object: another namespace's first change goes
// after its own gather; at most maxConcurrentWrites writes start together, earned ones first.
func TestPacingPerObject(t *testing.T) {
	p := newPacer(t)
	p.put("shop", "a", tripped)
	p.step(defaultPacing.gather)
	p.put("shop", "b", tripped)
	p.put("blog", "c", tripped)
	w, _ := p.step(defaultPacing.gather)
	if len(w) != 1 || w[0].namespace != "blog" {
		t.Errorf("another namespace's first change: wrote %+v, want blog's after its gather", w)
	}

	p.step(10 * time.Second)
	for i := range 6 {
		p.put(fmt.Sprintf("ns%d", i), "a", started)
	}
	p.clock.Step(2 * time.Second) // all six due, none taken yet
	p.put("ns4", "b", tripped)
	p.put("ns5", "b", tripped)
	jobs, _ := p.book.take(p.clock.Now())
	var order []string
	for _, j := range jobs {
		order = append(order, j.namespace)
	}
	if len(jobs) != maxConcurrentWrites || order[0] != "ns4" && order[0] != "ns5" || order[1] != "ns4" && order[1] != "ns5" {
		t.Errorf("six due, two earned: took %v, want %d with ns4 and ns5 first", order, maxConcurrentWrites)
	}
	for _, j := range jobs {
		p.book.write(context.Background(), j)
	}
	p.rec.take()
	w, _ = p.step(0)
	if len(w) != 2 {
		t.Errorf("after the first %d: %d more, want the other 2", maxConcurrentWrites, len(w))
	}
}

// TestPacingAfterFailures: a failed write keeps its changes and is retried after a
// backoff, never dropped; a pod gone takes its line, and the last line's going deletes
// the object.
func TestPacingAfterFailures(t *testing.T) {
	p := newPacer(t)
	p.rec.fail = errors.New("connection refused")
	p.put("shop", "a", tripped)
	_, next := p.step(defaultPacing.gather)
	if wait := next.Sub(p.clock.Now()); wait < 100*time.Millisecond || wait > 125*time.Millisecond {
		t.Errorf("first retry in %v, want 100–125 ms", wait)
	}
	for range 8 {
		_, next = p.step(next.Sub(p.clock.Now()))
	}
	if wait := next.Sub(p.clock.Now()); wait < 4*time.Second || wait > 5*time.Second {
		t.Errorf("retry after nine failures in %v, want the 4–5 s cap", wait)
	}
	p.rec.fail = nil
	p.put("shop", "b", adopted)
	w, _ := p.step(next.Sub(p.clock.Now()))
	wantWrites(t, "the server back", w, 2)

	p.book.podGone("shop", "a-uid")
	w, _ = p.step(time.Second)
	wantWrites(t, "a pod gone, after the hold", w, 1)
	if err := p.book.put(identity{namespace: "shop", pod: "a", podUID: "a-uid", node: "node-a"}, []breakerconfig.ReportEntry{tripped}); err == nil || !strings.Contains(err.Error(), "has left node node-a") {
		t.Errorf("a report from a pod gone: %v, want refused", err)
	}
	p.book.podGone("shop", "b-uid")
	w, _ = p.step(time.Second)
	if len(w) != 1 || w[0].pods != -1 {
		t.Errorf("the last pod gone: wrote %+v, want the object deleted", w)
	}
	if _, ok := p.book.reports["shop"]; ok {
		t.Error("the namespace's report is still kept after its object was deleted")
	}
}

// TestObjectBounds: the object never grows past the schema's bounds: MaxNodePods pods
// and MaxNodeReportEntries breaker-and-revision pairs. The pod that would push it over is
// refused with 409, and the others keep their lines; a pod already counted may still
// change its own.
func TestObjectBounds(t *testing.T) {
	p := newPacer(t)
	for i := range resiliencev1alpha1.MaxNodePods {
		p.put("shop", fmt.Sprintf("p%04d", i), started)
	}
	err := p.book.put(identity{namespace: "shop", pod: "one-too-many", podUID: "x", node: "node-a"}, []breakerconfig.ReportEntry{started})
	var r *refusal
	if !errors.As(err, &r) || r.status != 409 || !strings.Contains(r.msg, "1024 pods, the most a NodeBreakerReport counts") {
		t.Errorf("the 1,025th pod: %v, want 409 saying why", err)
	}
	p.put("shop", "p0000", tripped) // a pod already there may still change its line

	// Pods of 100 breakers each, all of other names: the third would make 300 pairs.
	breakers := func(first int) []breakerconfig.ReportEntry {
		out := make([]breakerconfig.ReportEntry, breakerconfig.MaxAgentEntries)
		for i := range out {
			out[i] = started
			out[i].Name = fmt.Sprintf("breaker-%03d", first+i)
		}
		return out
	}
	p.put("blog", "big0", breakers(0)...)
	p.put("blog", "big1", breakers(100)...)
	err = p.book.put(identity{namespace: "blog", pod: "big2", podUID: "big2-uid", node: "node-a"}, breakers(200))
	if !errors.As(err, &r) || r.status != 409 || !strings.Contains(r.msg, "would hold 300 entries (breakers × revisions), over the 256") {
		t.Errorf("a pod past the pairs' bound: %v, want 409 saying why", err)
	}
	p.put("blog", "big3", breakers(150)...) // 50 new pairs: 250 fit
	w, _ := p.step(time.Second)
	for _, o := range w {
		switch {
		case o.namespace == "shop" && (o.pods != resiliencev1alpha1.MaxNodePods || payments(o).EarnedOpen != 1):
			t.Errorf("shop's object counts %d pods, %d earned Opens; want %d and 1", o.pods, payments(o).EarnedOpen, resiliencev1alpha1.MaxNodePods)
		case o.namespace == "blog" && len(o.obj.Breakers) != 250:
			t.Errorf("blog's object holds %d entries, want the 250 of the pods that fit", len(o.obj.Breakers))
		}
	}
	if len(w) != 2 {
		t.Errorf("%d writes, want shop's and blog's", len(w))
	}
}

// TestClassify: which changes of a line go in the next slot (urgent), which moved a
// circuit (and so wait for the node's pods to agree), and which wait the hold.
func TestClassify(t *testing.T) {
	gen2 := started
	gen2.ConfigGeneration = 2
	refusedCfg := started
	refusedCfg.ConfigError = "openTimeout: must be positive"
	retimed := tripped
	retimed.Since = breakerconfig.NewTime(tripped.Since.Add(time.Second))
	other := entry("search", breakerconfig.StateClosed, breakerconfig.ReasonStarted)
	for _, tc := range []struct {
		name          string
		old, next     []breakerconfig.ReportEntry
		urgent, moved bool
	}{
		{"a pod's first word, Started", nil, []breakerconfig.ReportEntry{started}, false, false},
		{"a pod's first word, Tripped", nil, []breakerconfig.ReportEntry{tripped}, true, false},
		{"a pod's first word, a refused config", nil, []breakerconfig.ReportEntry{refusedCfg}, true, false},
		{"tripped", []breakerconfig.ReportEntry{started}, []breakerconfig.ReportEntry{tripped}, true, true},
		{"adopted", []breakerconfig.ReportEntry{started}, []breakerconfig.ReportEntry{adopted}, false, true},
		{"an earned Open re-timed", []breakerconfig.ReportEntry{tripped}, []breakerconfig.ReportEntry{retimed}, false, false},
		{"a new config generation", []breakerconfig.ReportEntry{started}, []breakerconfig.ReportEntry{gen2}, true, false},
		{"a config refused", []breakerconfig.ReportEntry{started}, []breakerconfig.ReportEntry{refusedCfg}, true, false},
		{"a breaker leaving", []breakerconfig.ReportEntry{started, other}, []breakerconfig.ReportEntry{started}, true, false},
		{"a breaker's first word beside others", []breakerconfig.ReportEntry{started}, []breakerconfig.ReportEntry{started, other}, false, false},
	} {
		if got := classify(tc.old, tc.next); got.urgent != tc.urgent || got.moved != tc.moved {
			t.Errorf("%s: urgent %v, moved %v; want %v, %v", tc.name, got.urgent, got.moved, tc.urgent, tc.moved)
		}
	}
}

// TestDue: how long each kind of pending change waits, from the first of it, after the
// object's last write 100 ms before it came (within a hold) or a minute before (a quiet
// spell); never sooner than an interval after that write.
func TestDue(t *testing.T) {
	p := defaultPacing
	at := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	recent, quiet := at.Add(-100*time.Millisecond), at.Add(-time.Minute)
	for _, tc := range []struct {
		name      string
		c         change
		lastWrite time.Time
		agreed    bool
		want      time.Duration
	}{
		{"an earned move after a quiet spell: the gather", change{urgent: true, moved: true}, quiet, false, p.gather},
		{"a new config generation after a quiet spell: the gather", change{urgent: true}, quiet, false, p.gather},
		{"the first write of an object: the gather", change{urgent: true}, time.Time{}, false, p.gather},
		{"an earned move within a hold, the pods not agreeing: settle", change{urgent: true, moved: true}, recent, false, p.settle},
		{"an echo, the pods not agreeing: settle", change{moved: true}, quiet, false, p.settle},
		{"the last echo, the pods agreeing: at once", change{moved: true}, quiet, true, 0},
		{"the last echo within an interval of the last write: the interval", change{moved: true}, recent, true, p.interval - 100*time.Millisecond},
		{"a new config generation within a hold: the hold", change{urgent: true}, recent, false, p.hold},
		{"traffic: the hold", change{}, quiet, true, p.hold},
		{"a flush: at once", change{moved: true, flush: true}, quiet, false, 0},
	} {
		tc.c.since = at
		if got := p.due(tc.c, tc.lastWrite, time.Time{}, tc.agreed).Sub(at); got != tc.want {
			t.Errorf("%s: due after %v, want %v", tc.name, got, tc.want)
		}
	}
}
