package nodeagent

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// TestPairsFollowLines: the entries a report would hold, as put judges them from the
// counts it keeps (pairsWith), are what walking every line finds, whatever the pods
// report, as they come, change, leave and move between revisions.
func TestPairsFollowLines(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 1))
	r := &nsReport{lines: map[types.UID]line{}, pairs: map[pair]int{}}
	// walk is the number of distinct pairs with uid's line replaced by next.
	walk := func(uid types.UID, next line) int {
		seen := map[pair]bool{}
		for u, l := range r.lines {
			if u == uid {
				continue
			}
			for _, e := range l.entries {
				seen[pair{e.Name, l.revision}] = true
			}
		}
		for _, e := range next.entries {
			seen[pair{e.Name, next.revision}] = true
		}
		return len(seen)
	}
	randomLine := func() line {
		l := line{revision: []string{"", "rev-a", "rev-b"}[rng.IntN(3)]}
		for _, name := range []string{"payments", "ledger", "search", "mail"} {
			if rng.IntN(2) == 0 {
				e := started
				e.Name = name
				l.entries = append(l.entries, e)
			}
		}
		return l
	}
	for step := range 20000 {
		uid := types.UID(fmt.Sprintf("pod-%d", rng.IntN(12)))
		switch rng.IntN(4) {
		case 0:
			r.dropLine(uid)
		case 1: // relabelled: the line moves to another revision
			if l, ok := r.lines[uid]; ok {
				l.revision = []string{"", "rev-a", "rev-b"}[rng.IntN(3)]
				r.setLine(uid, l)
			}
		default:
			next := randomLine()
			if got, want := r.pairsWith(r.lines[uid], next), walk(uid, next); got != want {
				t.Fatalf("step %d: with %s's line replaced, %d pairs counted, %d walked", step, uid, got, want)
			}
			r.setLine(uid, next)
		}
		if got, want := len(r.pairs), walk("", line{}); got != want {
			t.Fatalf("step %d: %d pairs kept, %d walked", step, got, want)
		}
	}
}

// TestLineTakesItsPodsRevision: a pod whose report came before the pod cache had it (read
// around the cache) counts at no revision until the cache has it; then its line moves to
// the pod's revision and the object is written again, as when a pod is relabelled.
func TestLineTakesItsPodsRevision(t *testing.T) {
	p := newPacer(t)
	pods := &hollowPods{revisions: map[types.UID]string{}, wiredIn: map[string]map[types.UID]bool{}}
	p.book.pods = pods
	p.put("shop", "web-0", started)
	if w, _ := p.step(time.Second); len(w) != 1 || entryOf(w[0].obj, "payments", "") == nil {
		t.Fatalf("writes %+v, want one counting the pod at no revision", w)
	}
	pods.set("shop", "web-0-uid", "rev-a")
	p.book.revisionChanged("shop", "web-0-uid")
	w, _ := p.step(time.Second)
	if len(w) != 1 || entryOf(w[0].obj, "payments", "rev-a") == nil || entryOf(w[0].obj, "payments", "") != nil {
		t.Fatalf("writes %+v, want one counting the pod at rev-a alone", w)
	}
	p.book.revisionChanged("shop", "web-0-uid") // told again, nothing moved
	if w, _ := p.step(time.Second); len(w) != 0 {
		t.Errorf("writes %+v after a revision that did not change, want none", w)
	}
}

// BenchmarkPut: what the agent spends taking one pod's report on a node of n pods of two
// revisions: a pod's trip or its recovery, one pod after another, as in an incident.
//
//	go test -run '^$' -bench BenchmarkPut -benchmem ./internal/nodeagent
func BenchmarkPut(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) {
			bk := newBook("node-a", &recorder{}, testingclock.NewFakeClock(time.Unix(0, 0)), slog.New(slog.DiscardHandler))
			pods := &hollowPods{revisions: map[types.UID]string{}, wiredIn: map[string]map[types.UID]bool{}}
			bk.pods = pods
			ids := make([]identity, n)
			for i := range ids {
				ids[i] = identity{namespace: "shop", pod: fmt.Sprintf("p%04d", i), podUID: types.UID(fmt.Sprintf("p%04d-uid", i)), node: "node-a"}
				pods.set("shop", ids[i].podUID, fmt.Sprintf("rev-%d", i%2))
				if err := bk.put(ids[i], []breakerconfig.ReportEntry{started}); err != nil {
					b.Fatal(err)
				}
			}
			states := [][]breakerconfig.ReportEntry{{tripped}, {started}}
			b.ResetTimer()
			for i := range b.N {
				if err := bk.put(ids[i%n], states[(i/n)%2]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
