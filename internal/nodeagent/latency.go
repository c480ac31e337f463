package nodeagent

import (
	"sync/atomic"
	"time"
)

// writeLatencyBuckets are the upper bounds of the write latency histogram: a write of a
// node report costs the API server milliseconds, and queues behind the node agents' own
// priority level for up to seconds when many nodes write at once.
var writeLatencyBuckets = []time.Duration{
	5 * time.Millisecond, 10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond, time.Second,
	2500 * time.Millisecond, 5 * time.Second, 10 * time.Second, 30 * time.Second,
}

// writeLatency counts how long the agent's writes took, successful or not, in the buckets
// above: kept by the agent itself, so that many agents in one process (the fleet
// benchmark's hollow nodes) each keep their own, and exported as a histogram.
type writeLatency struct {
	count, failed atomic.Int64
	sumNanos      atomic.Int64
	buckets       [12]atomic.Int64 // one per writeLatencyBuckets bound: writes at most that long
}

func (l *writeLatency) observe(d time.Duration, err error) {
	l.count.Add(1)
	if err != nil {
		l.failed.Add(1)
	}
	l.sumNanos.Add(int64(d))
	for i, bound := range writeLatencyBuckets {
		if d <= bound {
			l.buckets[i].Add(1)
		}
	}
}
