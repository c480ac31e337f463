package kube

import (
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// A concurrency limit's share (docs/design.md §12): the operator divides the fleet's
// maxInFlight among the pods that report the breaker and publishes the share, the pods it
// was divided among and a generation that moves with either. A pod the division counted
// runs the share. A pod started since (a scale-up) is not among those pods until its
// report reaches the operator and the division is published again, so until then it runs
// the share the pods counted would leave for one more (breakerconfig.ShareBeforeTold, the
// operator's rule): the fleet stays within its limit while shares propagate.
//
// The pod cannot read whether it was counted; it reads it from its own report. A division
// whose generation the pod first saw after the receiver held its report of the breaker
// counts it: the operator divides among the pods whose reports it holds. One first seen
// before then counts it only when it stays in force for toldAfter after the receiver took
// the report: had the report changed the count, a new division would have come within
// moments (the operator publishes one at most a second after a change of its pods), so the
// pods it was divided among include this one (a container that restarted in the same pod,
// which the operator never stopped counting). Without reporting, no division ever counts
// the pod, and it runs the smaller limit.

// toldAfter is how long a division must stay in force after the receiver took this pod's
// report before the pod takes it as counting itself.
const toldAfter = 30 * time.Second

// shareState is what a pod knows of the division of one breaker's limit.
type shareState struct {
	// generation is the division's generation, first seen at seenAt; counted says it
	// counts this pod.
	generation int64
	seen       bool
	seenAt     time.Time
	counted    bool
}

// shareLimitLocked is the limit on calls in flight this pod runs for breaker name under
// the division k, at now: the share, or ShareBeforeTold's while the division does not count
// the pod. It arms a recount for when toldAfter may settle it. Caller holds mu.
func (a *applier) shareLimitLocked(name string, c *configured, k breakerconfig.Concurrency, now time.Time) int {
	s := &c.share
	held, since := a.reportHeld(name)
	if !s.seen || s.generation != k.Generation {
		*s = shareState{generation: k.Generation, seen: true, seenAt: now, counted: held}
	}
	if !s.counted && held {
		if settled := since.Add(a.toldAfterOr()); !now.Before(settled) {
			s.counted = true
		} else {
			a.recountAt(settled.Sub(now))
		}
	}
	return k.Limit(s.counted)
}

// toldAfterOr is the applier's toldAfter, or the package's.
func (a *applier) toldAfterOr() time.Duration {
	if a.toldAfter > 0 {
		return a.toldAfter
	}
	return toldAfter
}

// reportTaken is the reporter's hook for a breaker whose report the receiver took for the
// first time: a division this pod runs the smaller limit under may come to count it
// toldAfter later, with nothing published to say so.
func (a *applier) reportTaken() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, c := range a.breakers {
		if c.share.seen && !c.share.counted {
			a.recountAt(a.toldAfterOr())
			return
		}
	}
}

// reportHeld says whether the receiver holds this pod's report of name, and since when;
// false without reporting.
func (a *applier) reportHeld(name string) (bool, time.Time) {
	if a.rep == nil {
		return false, time.Time{}
	}
	return a.rep.heldSince(name)
}

// recountAt arms the one recount timer to fire after d, unless it fires sooner already.
// Caller holds mu.
func (a *applier) recountAt(d time.Duration) {
	at := time.Now().Add(d)
	if a.recount != nil && !a.recountDue.After(at) {
		return
	}
	if a.recount != nil {
		a.recount.Stop()
	}
	a.recountDue = at
	a.recount = time.AfterFunc(d, a.recountShares)
}

// recountShares applies the policies again once a division may have come to count this
// pod (shareLimitLocked).
func (a *applier) recountShares() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.recount = nil
	a.applyPoliciesLocked()
}
