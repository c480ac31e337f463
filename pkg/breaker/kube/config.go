package kube

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/registry"
)

// configured is what this pod knows of one breaker named in the ConfigMap.
type configured struct {
	// good is the last config that parsed and validated; nil if none ever did, in which
	// case the breaker runs the default policy.
	good *breakerconfig.Config
	// refusal says why the latest published config was refused; empty when good is it.
	refusal string
	// logged is the refusal last logged, so that a bad entry that stays bad across many
	// ConfigMap updates is logged once.
	logged string
	// adopted is the last fleet verdict this pod adopted. The ConfigMap changes for many
	// reasons; adopting the same verdict again would, for a circuit already open, move its
	// open period back to the verdict's start after a local Trip restarted it.
	adopted *breaker.Verdict
	// share is what this pod knows of the division of a concurrency limit (concurrency.go).
	share shareState
}

// applier turns the published documents of the ConfigMap into registry policies, fleet
// verdicts and the reporter's config generations and refusals. Every config source feeds it:
// the node agent's stream, the ConfigMap's watch through the API, the mounted directory.
type applier struct {
	reg *registry.Registry
	def breaker.Policy // the registry's default policy
	rep *reporter      // nil: reporting is off
	log *slog.Logger

	mu       sync.Mutex
	synced   bool                   // guarded by mu: a first config has been applied
	breakers map[string]*configured // guarded by mu: by breaker name
	seen     int                    // guarded by mu: breakers of reg at the last reconcile

	// created is 1-buffered: the registry created a breaker or Group since the last
	// reconcile. One pending wake-up is enough; reconcile finds every new one.
	created chan struct{}
	// loaded is closed when synced turns true.
	loaded chan struct{}

	applies, adoptions atomic.Int64

	// recount re-applies the policies once a concurrency share may count this pod
	// (concurrency.go), due at recountDue; toldAfter, when set, replaces the package's.
	recount    *time.Timer // guarded by mu
	recountDue time.Time   // guarded by mu
	toldAfter  time.Duration
}

// apply applies the full set of published documents, by ConfigMap key; nil or empty
// means there is no ConfigMap, and every breaker reverts to the default policy.
func (a *applier) apply(data map[string]string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.applies.Add(1)

	next := make(map[string]*configured, len(data))
	for key, doc := range data {
		name, ok := breakerconfig.NameOfKey(key)
		if !ok {
			continue
		}
		c := a.breakers[name]
		if c == nil {
			c = &configured{}
		}
		next[name] = c
		cfg, err := parse(name, doc)
		if err != nil {
			c.refusal = err.Error()
			if c.refusal != c.logged {
				c.logged = c.refusal
				attrs := []any{"breaker", name, "error", err}
				if c.good != nil {
					attrs = append(attrs, "keptGeneration", c.good.Generation)
				}
				a.log.Warn("Refused published breaker config; keeping the last good one", attrs...)
			}
		} else {
			if c.good != nil && c.good.UID != cfg.UID {
				// The CircuitBreaker was deleted and created again under the same name: a
				// verdict adopted from the old one says nothing about the new one.
				a.log.Info("Breaker's CircuitBreaker was created anew", "breaker", name, "uid", cfg.UID)
				c.adopted = nil
			}
			c.good, c.refusal, c.logged = &cfg, "", ""
		}
	}
	for name := range a.breakers {
		if next[name] == nil {
			a.log.Info("Breaker no longer published; back to the default policy", "breaker", name)
			if b, ok := a.reg.Lookup(name); ok {
				a.configureCandidate(b, nil) // the default policy has no candidate
			}
			if a.rep != nil {
				a.rep.unconfigure(name)
			}
		}
	}
	a.breakers = next
	a.applyPoliciesLocked()
	if !a.synced {
		a.synced = true
		close(a.loaded)
		a.log.Info("Breaker config loaded", "breakers", len(next))
	}
	a.reconcileLocked()
}

// applyPoliciesLocked hands the registry the policy of every breaker with a good config,
// each concurrency limit the one this pod runs (shareLimitLocked). Caller holds mu.
func (a *applier) applyPoliciesLocked() {
	policies := make(map[string]breaker.Policy, len(a.breakers))
	now := time.Now()
	for name, c := range a.breakers {
		if c.good != nil {
			policies[name] = a.policyOf(name, c, now)
		}
	}
	if err := a.reg.Apply(policies); err != nil {
		// Every policy here passed Validate, so this is a bug, not bad input.
		a.log.Error("Registry refused validated policies", "error", err)
	}
}

// parse reads the document published under name.json.
func parse(name, doc string) (breakerconfig.Config, error) {
	cfg, err := breakerconfig.Parse([]byte(doc))
	if err != nil {
		return cfg, err
	}
	if cfg.Name != name {
		return breakerconfig.Config{}, fmt.Errorf("invalid breaker config: name %q does not match its key %q", cfg.Name, breakerconfig.Key(name))
	}
	return cfg, nil
}

// announced is the registry's creation hook. It wakes followCreations and never waits for
// mu: the Get that created the breaker may come from an observer that apply, holding mu,
// is delivering a transition to.
func (a *applier) announced(string) {
	select {
	case a.created <- struct{}{}:
	default:
	}
}

// followCreations reconciles after the registry creates breakers or Groups, until ctx
// ends.
func (a *applier) followCreations(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.created:
			a.reconcile()
		}
	}
}

// reconcile catches up with breakers and Groups the application created since the last
// call: they adopt the current fleet verdict and start being reported.
func (a *applier) reconcile() {
	a.mu.Lock()
	defer a.mu.Unlock()
	// Before the first config, apply reconciles every breaker there is by then. Breakers
	// and Groups are never removed from a registry, so a count that did not move means no
	// new ones.
	if !a.synced || a.registered() == a.seen {
		return
	}
	a.reconcileLocked()
}

// registered counts the breakers and Groups of the registry.
func (a *applier) registered() int { return len(a.reg.Names()) }

// reconcileLocked adopts fleet verdicts and hands config generations and refusals to the
// reporter, for every published breaker that exists in the registry. Caller holds mu.
// Breakers deliver transitions to the reporter synchronously from here, which is fine:
// the reporter never takes mu.
func (a *applier) reconcileLocked() {
	a.seen = a.registered()
	for name, c := range a.breakers {
		var gen int64
		if c.good != nil {
			gen = c.good.Generation
		}
		if g, ok := a.reg.LookupGroup(name); ok {
			// A Group is one CircuitBreaker, reported by its summary. A fleet verdict is
			// not applied to its members: the Group exists so that keys are judged
			// apart, and one verdict for all of them would undo that.
			if a.rep != nil {
				a.rep.configureGroup(name, g, a.policyOf(name, c, time.Now()), gen, c.refusal)
			}
			continue
		}
		b, ok := a.reg.Lookup(name)
		if !ok {
			// Not used by this application (yet): nothing to adopt into or report. If it is
			// created later, the next reconcile adopts the verdict current then.
			continue
		}
		if v, ok := fleetVerdict(c.good); ok && (c.adopted == nil || !sameVerdict(*c.adopted, v)) {
			b.Adopt(v)
			c.adopted = &v
			a.adoptions.Add(1)
		}
		// What the operator counts of the fleet, on every config applied: the pod count
		// divides the retry budget's floor, and a quiet pod throttles on the fleet's
		// requests and accepts (docs/design.md §5.15, §5.16).
		// The fleet's baseline too, which an adaptive limiter's own may not pass (§12).
		withTraffic := c.good != nil && (c.good.RetryBudget != nil || c.good.Throttle != nil)
		withConcurrency := c.good != nil && c.good.Concurrency != nil
		if c.good != nil {
			if f, ok := fleetOf(c.good, withTraffic); ok {
				b.SetFleet(f)
			}
		}
		a.configureCandidate(b, c.good)
		if a.rep != nil {
			a.rep.configure(b, gen, c.refusal, sampled{traffic: withTraffic, concurrency: withConcurrency})
		}
	}
	if a.rep != nil {
		a.rep.flush()
	}
}

// policyOf is the policy the breaker or Group c, named name, runs at now: its last good
// config's, its concurrency limit the one this pod runs, or the registry's default.
// Caller holds mu.
func (a *applier) policyOf(name string, c *configured, now time.Time) breaker.Policy {
	if c.good == nil {
		return a.def
	}
	// Parse validated it, so PolicyOf cannot fail.
	p, _ := PolicyOf(*c.good)
	if k := c.good.Concurrency; k != nil {
		p.MaxInFlight = a.shareLimitLocked(name, c, *k, now)
	}
	return p
}

// fleetVerdict is the verdict a good config carries for this pod to adopt.
func fleetVerdict(c *breakerconfig.Config) (breaker.Verdict, bool) {
	if c == nil || c.Scope != breakerconfig.ScopeFleet || c.Verdict == nil {
		return breaker.Verdict{}, false
	}
	// Parse validated the state, so stateOf knows it.
	s, ok := stateOf(c.Verdict.State)
	if !ok {
		return breaker.Verdict{}, false
	}
	// An open verdict's period is the fleet's: every pod keeps it (docs/design.md §5.13).
	return breaker.Verdict{State: s, Since: c.Verdict.Since,
		ConsecutiveOpens: c.Verdict.ConsecutiveOpens, OpenTimeout: time.Duration(c.Verdict.OpenTimeout)}, true
}

func sameVerdict(a, b breaker.Verdict) bool {
	return a.State == b.State && a.Since.Equal(b.Since) &&
		a.ConsecutiveOpens == b.ConsecutiveOpens && a.OpenTimeout == b.OpenTimeout
}
