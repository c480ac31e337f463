package counting

import (
	"cmp"
	"slices"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// A breaker Group's pods each report one summary of their per-key breakers
// (docs/groups.md), and a node's entry adds its pods' up; the status adds the carriers'
// up (status.keys) and shows the notable pods' own (status.members).

// minKeysBound is the fewest keys per pod a carrier's Groups count for in aggregateKeys:
// as many as a Group holds unless told otherwise (pkg/breaker's Group), so that no honest
// pod of a fleet whose other Groups hold few keys is scaled down.
const minKeysBound = 1024

// aggregateKeys adds up the breaker Groups the entries report, one pod one share
// (docs/design.md §5.17). Each carrier's keys per pod count for at most maxShareOfMedian
// times the median pod's (or minKeysBound, if more), scaled down with its open and
// halfOpen keys. Then keys is the most any pod holds (within that bound), open and
// halfOpen are summed, and worst names the keys that are not closed in the most pods,
// each carrier naming a key once for each of its pods, then by name. nil when no entry
// reports a Group.
func aggregateKeys(entries []Entry) *resiliencev1alpha1.KeySummary {
	var perPod []weighted[int64]
	for i := range entries {
		if k := entries[i].Keys; k != nil && entries[i].Pods > 0 {
			perPod = append(perPod, weighted[int64]{k.Keys / entries[i].Pods, entries[i].Pods})
		}
	}
	if len(perPod) == 0 {
		return nil
	}
	bound := maxShareOfMedian * max(upperMedian(perPod, compareInt64), minKeysBound)
	sum := &resiliencev1alpha1.KeySummary{}
	// In int64: int32 sums of counts as large as a report may hold wrapped below 0, which
	// the status schema refuses, and every later status write of the breaker with them.
	var most, open, halfOpen int64
	inPods := map[string]int64{}
	for i := range entries {
		e := &entries[i]
		k := e.Keys
		if k == nil || e.Pods <= 0 {
			continue
		}
		keys, o, h := k.Keys, k.Open, k.HalfOpen
		if limit := mulSat(bound, e.Pods); keys > limit {
			o, h, keys = mulDiv(o, limit, keys), mulDiv(h, limit, keys), limit
		}
		most = max(most, min(k.Most, bound, keys))
		open += o
		halfOpen += h
		for _, key := range k.Worst {
			inPods[key] += e.Pods
		}
	}
	sum.Keys, sum.Open, sum.HalfOpen = saturated(most), saturated(open), saturated(halfOpen)
	if len(inPods) == 0 {
		return sum
	}
	worst := make([]string, 0, len(inPods))
	for key := range inPods {
		worst = append(worst, key)
	}
	slices.SortFunc(worst, func(a, b string) int { return cmp.Or(cmp.Compare(inPods[b], inPods[a]), cmp.Compare(a, b)) })
	sum.Worst = worst[:min(len(worst), breakerconfig.MaxWorstKeys)]
	return sum
}

// groupCounts is what a pod's Group summary counts for: each count within [0,
// MaxKeyCount], and open and halfOpen together at most keys. Worst is left out.
func groupCounts(k *resiliencev1alpha1.KeySummary) resiliencev1alpha1.KeySummary {
	c := func(n, most int32) int32 { return min(max(n, 0), most) }
	out := resiliencev1alpha1.KeySummary{Keys: c(k.Keys, breakerconfig.MaxKeyCount)}
	out.Open = c(k.Open, out.Keys)
	out.HalfOpen = c(k.HalfOpen, out.Keys-out.Open)
	return out
}

// worstKeys appends to named a pod's worst keys as status text (Text), empty ones and
// repeats left out, at most MaxWorstKeys, and returns it.
func worstKeys(worst, named []string) []string {
	for _, key := range worst {
		key = Text(key, MaxNameText)
		if key == "" || slices.Contains(named, key) {
			continue
		}
		named = append(named, key)
		if len(named) == breakerconfig.MaxWorstKeys {
			break
		}
	}
	return named
}

// memberKeys is a pod's Group summary as status.members shows it: its own counts, made
// consistent (groupCounts), its worst keys as status text; nil for none.
func memberKeys(k *resiliencev1alpha1.KeySummary) *resiliencev1alpha1.KeySummary {
	if k == nil {
		return nil
	}
	c := groupCounts(k)
	c.Worst = worstKeys(k.Worst, nil)
	return &c
}
