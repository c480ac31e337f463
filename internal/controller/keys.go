package controller

import (
	"cmp"
	"slices"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// A breaker Group's pods each report one summary of their per-key breakers
// (docs/groups.md); the status adds the summaries up (status.keys) and shows each pod's
// own (status.members).

// aggregateKeys adds up the breaker Groups the members report, one pod one share
// (docs/design.md §5.17). Each pod's counts are made consistent first (each within
// [0, MaxKeyCount], open and halfOpen together at most its keys) and scaled down, when its
// keys pass maxShareOfMedian times the median Group pod's (or minKeysBound, if more), to
// that bound. Then keys is the most any pod holds (pods hold the keys their own traffic
// made), open and halfOpen are summed over the pods, and worst names the keys that are
// not closed in the most pods, each pod naming a key once, then by name. nil when no
// member reports a Group.
func aggregateKeys(members []member) *resiliencev1alpha1.KeySummary {
	var held []int32
	for i := range members {
		if k := members[i].entry.Keys; k != nil {
			if held == nil {
				held = make([]int32, 0, len(members))
			}
			held = append(held, groupCounts(k).Keys)
		}
	}
	if len(held) == 0 {
		return nil
	}
	bound := int64(maxShareOfMedian) * int64(max(nth(held, len(held)/2, cmp.Compare[int32]), minKeysBound)) // the upper median, as for traffic
	sum := &resiliencev1alpha1.KeySummary{}
	// In int64: int32 sums of counts as large as a report may hold wrapped below 0, which
	// the status schema refuses, and every later status write of the breaker with them.
	var open, halfOpen int64
	inPods := map[string]int{}
	for i := range members {
		k := members[i].entry.Keys // the report's, in the cache: read only
		if k == nil {
			continue
		}
		c := groupCounts(k)
		keys, o, h := int64(c.Keys), int64(c.Open), int64(c.HalfOpen)
		if keys > bound {
			o, h, keys = o*bound/keys, h*bound/keys, bound
		}
		sum.Keys = max(sum.Keys, int32(keys))
		open += o
		halfOpen += h
		// As status text, each key once per pod: one pod, one vote for a key.
		var named [breakerconfig.MaxWorstKeys]string
		for _, key := range worstKeys(k.Worst, named[:0]) {
			inPods[key]++
		}
	}
	sum.Open, sum.HalfOpen = saturated(open), saturated(halfOpen)
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

// minKeysBound is the fewest keys a pod's Group counts for in aggregateKeys: as many as a
// Group holds unless told otherwise (pkg/breaker's Group), so that no honest pod of a
// fleet whose other Groups hold few keys is scaled down.
const minKeysBound = 1024

// groupCounts is what a pod's Group summary counts for: each count within [0,
// MaxKeyCount], and open and halfOpen together at most keys. Worst is left out.
func groupCounts(k *resiliencev1alpha1.KeySummary) resiliencev1alpha1.KeySummary {
	count := func(n, most int32) int32 { return min(max(n, 0), most) }
	c := resiliencev1alpha1.KeySummary{Keys: count(k.Keys, breakerconfig.MaxKeyCount)}
	c.Open = count(k.Open, c.Keys)
	c.HalfOpen = count(k.HalfOpen, c.Keys-c.Open)
	return c
}

// worstKeys appends to named a pod's worst keys as status text (reportText), empty ones
// and repeats left out, at most MaxWorstKeys, and returns it. A caller may give named room
// on its stack.
func worstKeys(worst, named []string) []string {
	for _, key := range worst {
		key = reportText(key, maxNameText)
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

// memberKeys is a member's Group summary as status.members shows it: its own counts,
// made consistent (groupCounts), its worst keys as status text; nil for none.
func memberKeys(k *resiliencev1alpha1.KeySummary) *resiliencev1alpha1.KeySummary {
	if k == nil {
		return nil
	}
	c := groupCounts(k)
	c.Worst = worstKeys(k.Worst, nil)
	return &c
}
