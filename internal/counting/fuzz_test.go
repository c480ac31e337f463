package counting

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// counts reads a fuzzer's bytes as counts, 0 once they run out.
type counts struct{ b []byte }

func (c *counts) int64() int64 {
	if len(c.b) < 8 {
		c.b = nil
		return 0
	}
	n := int64(binary.LittleEndian.Uint64(c.b))
	c.b = c.b[8:]
	return n
}

func (c *counts) int32() int32 {
	if len(c.b) < 4 {
		c.b = nil
		return 0
	}
	n := int32(binary.LittleEndian.Uint32(c.b))
	c.b = c.b[4:]
	return n
}

func (c *counts) byte() byte {
	if len(c.b) == 0 {
		return 0
	}
	n := c.b[0]
	c.b = c.b[1:]
	return n
}

// nodeEntryOf reads one node entry, whatever its counts, as far as the bytes go.
func (c *counts) nodeEntryOf(i int) resiliencev1alpha1.NodeBreakerEntry {
	e := resiliencev1alpha1.NodeBreakerEntry{Name: "b", Revision: fmt.Sprintf("r%d", c.byte()%3)}
	e.Pods, e.Closed, e.Open, e.HalfOpen = c.int32(), c.int32(), c.int32(), c.int32()
	e.EarnedOpen, e.EarnedClosed, e.HoldingVerdict = c.int32(), c.int32(), c.int32()
	e.OnLatestConfig, e.ConfigErrors, e.ConsecutiveOpens = c.int32(), c.int32(), c.int32()
	e.OpenSince = &metav1.MicroTime{Time: t0.Add(time.Duration(c.int64()))}
	e.ClosedSince = &metav1.MicroTime{Time: t0.Add(time.Duration(c.int64()))}
	e.OpenTimeout = &metav1.Duration{Duration: time.Duration(c.int64())}
	e.ConfigGeneration = c.int64()
	e.Calls, e.Failures = c.int64(), c.int64()
	e.Requests, e.Accepts, e.Retries, e.Throttled = c.int64(), c.int64(), c.int64(), c.int64()
	flags := c.byte()
	if e.ConfigErrors != 0 {
		e.ConfigError = "\x1b[2Jbad\tconfig"
	}
	if flags&1 != 0 {
		e.Keys = &resiliencev1alpha1.NodeKeySummary{Keys: c.int32(), Open: c.int32(), HalfOpen: c.int32(), Most: c.int32(), Worst: []string{"h1", "\x1b[1Ah2", ""}}
	}
	if flags&2 != 0 {
		start := metav1.NewTime(t0.Add(time.Duration(c.int64())))
		e.Candidate = &resiliencev1alpha1.NodeCandidateSummary{Pods: c.int32(), Open: c.int32(), HalfOpen: c.int32(),
			Opens: c.int64(), WouldRefuse: c.int64(), EnforcedOpens: c.int64(), Refused: c.int64(),
			TimeOpen: &metav1.Duration{Duration: time.Duration(c.int64())}, EnforcedTimeOpen: &metav1.Duration{Duration: time.Duration(c.int64())}, StartTime: &start}
	}
	states := []resiliencev1alpha1.State{closed, open, halfOpen, "Unknown"}
	reasons := []string{started, tripped, manual, failed, succeeded, timedOut, adopted, forced}
	for k := range int(flags>>2) % 8 {
		p := resiliencev1alpha1.NotablePod{Name: fmt.Sprintf("web-%d-%d", i, k), UID: types.UID(fmt.Sprint(k)), Reason: reasons[c.byte()%8],
			PodCircuit: resiliencev1alpha1.PodCircuit{State: states[c.byte()%4], Since: metav1.NewTime(t0.Add(time.Duration(c.int64()))),
				ConsecutiveOpens: c.int32(), FailureRatePercent: ptr.To(c.int32()), Calls: ptr.To(c.int64())}}
		e.Notable = append(e.Notable, p)
	}
	return e
}

// Whatever a node entry's counts (the schema's bounds and rules aside: a report stored
// before them, or a schema that drifted), FromNode reads it as an entry within them, and
// what Aggregate makes of such entries among pods' own reports is a status the API server
// takes: no count below 0, every percentage within [0, 100], and no panic.
//
//	go test -run '^$' -fuzz FuzzFromNodeAndAggregate ./internal/counting
func FuzzFromNodeAndAggregate(f *testing.F) {
	seed := func(values ...int64) []byte {
		var b []byte
		for _, v := range values {
			b = binary.LittleEndian.AppendUint64(b, uint64(v))
		}
		return b
	}
	f.Add([]byte{}, int64(3), true, uint8(50))
	f.Add(seed(1<<32|100, 60<<32|40, 60, 0, 0, 0, 0, 0, 1, 1000, 500, 100, 50, 10, 0), int64(100), true, uint8(50))
	f.Add(seed(math.MaxInt64, math.MaxInt64, math.MaxInt64, math.MaxInt64, math.MaxInt64, math.MaxInt64, math.MaxInt64, math.MaxInt64,
		math.MaxInt64, math.MaxInt64, math.MaxInt64, math.MaxInt64, math.MaxInt64, math.MaxInt64, math.MaxInt64, math.MaxInt64, -1), int64(math.MaxInt64), false, uint8(255))
	f.Add(seed(math.MinInt64, math.MinInt64, math.MinInt64, math.MinInt64, math.MinInt64, math.MinInt64, math.MinInt64, math.MinInt64,
		math.MinInt64, math.MinInt64, math.MinInt64, math.MinInt64, math.MinInt64, math.MinInt64, math.MinInt64, math.MinInt64, -1), int64(math.MinInt64), true, uint8(0))
	f.Fuzz(func(t *testing.T, data []byte, running int64, fleet bool, quorum uint8) {
		cb := throttled(2)
		cb.Spec.RetryBudget = &resiliencev1alpha1.RetryBudget{}
		cb.Spec.Candidate = &resiliencev1alpha1.CandidatePolicy{FailureRatePercent: ptr.To[int32](10)}
		cb.Spec.MaxOpenTimeout = &metav1.Duration{Duration: time.Hour}
		cb.CreationTimestamp = metav1.NewTime(t0.Add(-time.Hour))
		if fleet {
			cb.Spec.Scope, cb.Spec.FleetQuorumPercent = resiliencev1alpha1.ScopeFleet, ptr.To(int32(quorum%101))
		}
		// Pods on their own beside the nodes, one of them a Group, so that the shapes mix.
		solo := at("solo", open, tripped, time.Second)
		solo.entry.Requests, solo.entry.Accepts = ptr.To[int64](100), ptr.To[int64](50)
		group := at("group", closed, succeeded, 2*time.Second)
		group.entry.Keys = &resiliencev1alpha1.KeySummary{Keys: 10, Open: 2}
		entries := entriesOf(solo, group)
		c := &counts{b: data}
		for i := 0; i < 6 && len(c.b) > 0; i++ {
			e := c.nodeEntryOf(i)
			seen := Seen{OpenSince: t0, ClosedSince: t0, Notable: []time.Time{t0}}
			got, _ := FromNode(fmt.Sprintf("node-%d", i), &e, seen, running>>uint(i), func(name string, _ types.UID) bool { return len(name)%2 == 0 })
			withinBounds(t, got)
			entries = append(entries, got)
		}
		kept, odd := OddShapes(entries)
		v := Aggregate(cb, kept)
		v.OddShape = odd
		nonNegative(t, v)
		for _, pc := range percentages(v) {
			if *pc < 0 || *pc > 100 {
				t.Errorf("a percentage of %d in %+v", *pc, v)
			}
		}
		if v.Counts == nil {
			return
		}
		// The sentences the controller writes from it.
		switch v.State {
		case open:
			_ = v.OpenedMessage(cb)
		case halfOpen:
			_ = v.HalfOpenedMessage(cb)
		}
		if len(v.OddShape) > 0 {
			_ = v.OddShapeMessage()
		}
	})
}

// nonNegative fails t if a count of v's status is below 0.
func nonNegative(t *testing.T, v View) {
	t.Helper()
	var ns []int64
	if c := v.Counts; c != nil {
		ns = append(ns, int64(c.Reporting), int64(c.Open), int64(c.HalfOpen), int64(c.Closed), int64(c.OnLatestConfig))
		if int64(c.Open)+int64(c.HalfOpen)+int64(c.Closed) > int64(c.Reporting) || c.OnLatestConfig > c.Reporting {
			t.Errorf("counts %+v: more pods in a state than reporting", *c)
		}
	}
	ns = append(ns, int64(v.ConsecutiveOpens))
	if v.OpenTimeout != nil {
		ns = append(ns, int64(v.OpenTimeout.Duration))
	}
	if st := v.Traffic; st != nil {
		ns = append(ns, int64(st.Pods), st.Requests, st.Accepts, st.Retries, st.Throttled)
	}
	if k := v.Keys; k != nil {
		ns = append(ns, int64(k.Keys), int64(k.Open), int64(k.HalfOpen))
	}
	if c := v.Candidate; c != nil {
		ns = append(ns, int64(c.Pods), int64(c.Open), int64(c.HalfOpen), c.Opens, c.WouldRefuse)
		if c.Enforced != nil {
			ns = append(ns, c.Enforced.Opens, c.Enforced.Refused)
		}
	}
	for _, r := range v.Revisions {
		ns = append(ns, int64(r.Pods), int64(r.Open))
		if r.Calls != nil {
			ns = append(ns, *r.Calls)
		}
	}
	for _, n := range ns {
		if n < 0 {
			t.Errorf("a count of %d in %+v", n, v)
			return
		}
	}
}
