package counting

import (
	"math/rand/v2"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// weighted is a value that stands for weight pods: a carrier's figure per pod, counted
// once for each pod it speaks for.
type weighted[T any] struct {
	value  T
	weight int64
}

// nthWeighted returns the value a sort of the pods by compare would put at index n (0 ≤
// n < the total weight), each item standing for weight pods in a row; the zero value for
// no pods. It reorders xs. A selection around random pivots, in expected linear time
// whatever the values (which pods choose): a breaker of 5,000 pods that report on their
// own has 5,000 carriers, and sorting them took most of an aggregate's time
// (docs/benchmarks.md, "One pod, one share"). Items that compare equal are equal values
// here, so which of them is picked changes nothing.
func nthWeighted[T any](xs []weighted[T], n int64, compare func(a, b T) int) T {
	var zero T
	total := totalWeight(xs)
	if total <= 0 {
		return zero
	}
	n = min(max(n, 0), total-1)
	for len(xs) > 1 {
		pivot := xs[rand.IntN(len(xs))].value
		// Three ways: below the pivot, equal to it, above it.
		below, i, above := 0, 0, len(xs)
		for i < above {
			switch c := compare(xs[i].value, pivot); {
			case c < 0:
				xs[below], xs[i] = xs[i], xs[below]
				below++
				i++
			case c > 0:
				above--
				xs[i], xs[above] = xs[above], xs[i]
			default:
				i++
			}
		}
		less, equal := totalWeight(xs[:below]), totalWeight(xs[below:above])
		switch {
		case n < less:
			xs = xs[:below]
		case n < less+equal:
			return pivot
		default:
			n -= less + equal
			xs = xs[above:]
		}
	}
	return xs[0].value
}

// totalWeight is the pods the items stand for.
func totalWeight[T any](xs []weighted[T]) int64 {
	var n int64
	for _, x := range xs {
		n += x.weight
	}
	return n
}

// lowerMedian and upperMedian are the middle pod of the items, the lower or the upper of
// the two middle ones of an even count; the zero value for no pods.
func lowerMedian[T any](xs []weighted[T], compare func(a, b T) int) T {
	return nthWeighted(xs, max(totalWeight(xs)-1, 0)/2, compare)
}

func upperMedian[T any](xs []weighted[T], compare func(a, b T) int) T {
	return nthWeighted(xs, totalWeight(xs)/2, compare)
}

// boundedSum adds up per-carrier sums, each counting for at most maxShareOfMedian times the
// upper median pod's figure (its carrier's sum per pod), or times floor if more, per pod it
// speaks for: a pod counts for at most a few typical pods. Each item is (sum, pods). The
// sum is at most most.
func boundedSum(items []weighted[int64], floor, most int64) int64 {
	perPod := make([]weighted[int64], 0, len(items))
	for _, it := range items {
		if it.weight > 0 {
			perPod = append(perPod, weighted[int64]{it.value / it.weight, it.weight})
		}
	}
	bound := maxShareOfMedian * max(upperMedian(perPod, compareInt64), floor)
	var sum int64
	for _, it := range items {
		sum = min(sum+min(it.value, mulSat(bound, it.weight)), most)
	}
	return sum
}

// mulSat is a × b for a, b ≥ 0, the int64 maximum when it does not fit.
func mulSat(a, b int64) int64 {
	if a != 0 && b > (1<<63-1)/a {
		return 1<<63 - 1
	}
	return a * b
}

func compareInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// maxShareOfMedian is how many times the median reporting pod's figure one pod counts for
// at most in a sum of status. Pods behind one Service see about the same traffic; a pod a
// few times busier than the median (a hot connection, a slow start of the others) still
// counts in full.
const maxShareOfMedian = 4

// durationOr reads an optional duration of the spec, def when it is unset.
func durationOr(d *metav1.Duration, def time.Duration) time.Duration {
	if d == nil {
		return def
	}
	return d.Duration
}

// saturated is n as an int32 count, the largest one when it does not fit.
func saturated(n int64) int32 {
	return int32(min(max(n, 0), 1<<31-1))
}
