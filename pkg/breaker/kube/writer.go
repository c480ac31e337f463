package kube

import (
	"context"
	"math"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// writeBackoff paces the retries of a failed write: exponential and capped, so a pod that
// was cut off for a minute reports within a few seconds of the server's return without
// hammering it meanwhile: 100 ms, doubling, 4 s at most, each step up to a quarter
// longer at random (so 5 s at most) so that a fleet that failed together does not retry
// together.
var writeBackoff = wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.25, Steps: math.MaxInt32, Cap: 4 * time.Second}

// refusedBackoff paces the retries of a report the server refuses: at the cap from the
// first, since the refusal lasts until somebody lifts it (a CRD upgraded, a policy
// fixed), and the report must not be lost meanwhile.
var refusedBackoff = wait.Backoff{Duration: writeBackoff.Cap}

// writeTimeout bounds one write to the API server, so that a server that accepts the
// connection and never answers is retried like one that refuses it. It is longer than
// the longest an API server keeps a request in its priority-and-fairness queue (a
// quarter of its 60 s request deadline, 15 s) plus the write itself: in a report storm a write the server has
// queued is answered, or refused with a 429 that client-go retries after the server's
// Retry-After, rather than abandoned by this pod and sent again to the back of the queue,
// which would cost the server the same write twice.
const writeTimeout = 30 * time.Second

// run is the writer: it waits to be woken, writes the report if it changed, and on
// failure backs off and tries again with whatever the entries hold by then. While the
// report holds a Group it also wakes every groupRefreshInterval to re-read the Group's
// summary. It returns when ctx ends.
func (r *reporter) run(ctx context.Context) {
	retry := writeBackoff
	var failing string // the error of the current run of failures, logged once
	var groups groupRefresh
	defer groups.stop()
	var traffic trafficTimer
	defer traffic.stop()
	for {
		check, armed := r.trafficCheck(time.Now())
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		case <-groups.tick(r.reportsGroups()):
		case <-traffic.after(check, armed):
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
					r.log.Info("Breaker report written again after failures", "report", r.sink.describe())
					failing = ""
				}
				retry = writeBackoff
				continue
			}
			r.failures.Add(1)
			msg := err.Error()
			r.lastErr.Store(&msg)
			refused := r.sink.refused(err)
			if refused {
				r.rejected.Add(1)
			}
			if msg != failing {
				// Once per distinct error, not once per retry.
				if refused {
					r.log.Error("The receiver refused this pod's breaker report; retrying with backoff", "receiver", r.sink.receiver(), "report", r.sink.describe(), "error", err)
				} else {
					r.log.Warn("Cannot write this pod's breaker report; retrying with backoff", "report", r.sink.describe(), "error", err)
				}
				failing = msg
			}
			if refused {
				retry = refusedBackoff
			}
			t := time.NewTimer(retry.Step())
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}
}

// write sends the whole report: the entries of names.
func (r *reporter) write(ctx context.Context, names []string, ms []member) error {
	entries := make([]breakerconfig.ReportEntry, len(names))
	for i, name := range names {
		entries[i] = reportEntry(name, ms[i])
	}
	return r.sink.send(ctx, entries)
}

// lastError returns the last write error, or "".
func (r *reporter) lastError() string {
	if p := r.lastErr.Load(); p != nil {
		return *p
	}
	return ""
}
