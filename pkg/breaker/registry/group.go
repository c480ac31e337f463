package registry

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/internal/core"
	"github.com/fusebox-dev/fusebox/pkg/breaker/observe"
)

// defaultMaxKeys is how many per-key breakers a [Group] keeps unless told otherwise. A
// breaker costs well under a kilobyte, so the default bounds a Group at about a megabyte
// while leaving room for a service's hosts, routes or busiest tenants.
const defaultMaxKeys = 1024

// keySeparator joins a Group's name and a key into the name of the key's breaker:
// "<group>/<key>". A Group's name may not contain it; a key may.
const keySeparator = "/"

// SplitKeyName splits the name of a Group member, "<group>/<key>", into the Group's name
// and the key; ok is false for a name without the separator. Observers that export
// metrics label by group to keep one series per Group instead of one per key; logs can
// carry both.
func SplitKeyName(name string) (group, key string, ok bool) {
	return strings.Cut(name, keySeparator)
}

// Group holds one breaker per key under one policy: per host, per route, per tenant, so that
// one flaky host or tenant opens the circuit for itself and not for everybody else. A
// key's breaker is created on first use with the Group's policy and options, and is
// named "<group>/<key>" (see [SplitKeyName]), so observers see which key moved. [Group.Update]
// reaches every member, and those created later.
//
// The Group keeps at most 1024 breakers, or the bound [Group.SetMaxKeys] sets. When a new
// key would exceed the bound, the least recently used closed breakers are evicted first; a
// key used again after its eviction starts afresh, closed, with an empty window. An open
// or half-open breaker is never evicted: it holds an outage, and forgetting it would send
// full traffic to a dependency that is down, or cut a half-open probe short. A member
// held in a forced mode (ModeForcedOpen, ModeForcedClosed) is evictable whatever its
// state, since the mode and not its calls decides it. When every member is open or
// half-open, the new key is still served and the Group grows past its bound until
// members close again; the next creations shrink it back. Refusing the new key instead
// would turn the outage of some keys into an outage for a key that has done nothing
// wrong, which is what a Group exists to prevent; the bound is against keys nobody uses
// any more, not against outages. Where keys come from untrusted input (a Host header, a
// tenant ID from the request), map them onto a known set first.
//
// Looking up an existing key takes no lock and allocates nothing; marking it used writes
// its timestamp, read on the clock its breakers read (the coarse clock, or the one
// breaker.WithClock injected), only when that clock has moved (once per millisecond at
// most), so busy keys cost no shared write per call.
//
// A Group is safe for concurrent use.
type Group struct {
	name  string
	opts  []breaker.Option
	clock *core.Reader // the clock opts inject; nil: the coarse clock

	// index maps keys to members for the call path: a lock-free read.
	index sync.Map // string → *groupMember

	// updateMu serialises Update, so that two racing updates cannot leave members on the
	// older policy.
	updateMu sync.Mutex

	mu sync.Mutex
	// guarded by mu:
	policy   breaker.Policy
	maxKeys  int
	members  map[string]*groupMember
	open     int // members whose last delivered state is Open
	halfOpen int // ... HalfOpen
	// The aggregate state (Open while any member is, else HalfOpen while any member is,
	// else Closed), when it was reached, and the member transition that moved it there.
	state   breaker.State
	since   time.Time
	reached observe.Transition
}

var _ observe.Observer = (*groupMember)(nil)

// groupMember is one key's breaker and what the Group tracks of it.
type groupMember struct {
	g   *Group
	key string
	b   *breaker.Breaker
	// lastUsed is the Group's monotonic reading (Group.now) at the latest Get, written only
	// when it changed.
	lastUsed atomic.Int64

	// guarded by g.mu:
	state   breaker.State
	since   time.Time // when state was reached
	period  uint64    // Transition.Period of the last delivery applied
	evicted bool
}

// NewGroup returns an empty Group named name whose members get policy p and opts. name
// may not contain "/", which separates it from the keys in its members' names; a policy that fails [breaker.Policy.Validate] is refused.
func NewGroup(name string, p breaker.Policy, opts ...breaker.Option) (*Group, error) {
	if strings.Contains(name, keySeparator) {
		return nil, fmt.Errorf("breaker: group name %q contains %q, which separates a group's name from its keys", name, keySeparator)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	g := &Group{
		name:    name,
		opts:    slices.Clone(opts),
		policy:  own(p),
		maxKeys: defaultMaxKeys,
		members: map[string]*groupMember{},
	}
	if c := core.Apply(opts).Clock; c != nil {
		g.clock = core.NewReader(c)
	}
	g.since = g.wall()
	return g, nil
}

// now reads the monotonic timeline the Group's members read: the coarse clock (one atomic
// load), or their injected clock.
func (g *Group) now() int64 {
	if g.clock == nil {
		return core.CoarseNow()
	}
	return g.clock.Mono()
}

// wall reads the wall clock the Group's members read.
func (g *Group) wall() time.Time {
	if g.clock == nil {
		return time.Now()
	}
	return time.Unix(0, g.clock.Instant().Wall)
}

// own returns p with pointer fields of its own (RetryBudget, Throttle), so that whoever
// handed p in cannot change the policy the Group and the Registry keep by writing through
// them.
func own(p breaker.Policy) breaker.Policy {
	p.RetryBudget, p.Throttle = core.Copy(p.RetryBudget), core.Copy(p.Throttle)
	return p
}

// Get returns the breaker of key, creating it on first use (which may evict another key's
// breaker, see [Group]). For a key that exists it takes no lock and allocates nothing.
func (g *Group) Get(key string) *breaker.Breaker {
	if v, ok := g.index.Load(key); ok {
		m := v.(*groupMember)
		if now := g.now(); m.lastUsed.Load() != now {
			m.lastUsed.Store(now)
		}
		return m.b
	}
	return g.create(key)
}

func (g *Group) create(key string) *breaker.Breaker {
	g.mu.Lock()
	defer g.mu.Unlock()
	if m, ok := g.members[key]; ok {
		return m.b
	}
	for len(g.members) >= g.maxKeys && g.evictOne() {
	}
	m := &groupMember{g: g, key: key}
	// The Group's own observer goes first, so that other observers, told of a member's
	// transition, find the Group's summary already showing it.
	opts := make([]breaker.Option, 0, len(g.opts)+1)
	opts = append(opts, breaker.WithObserver(m))
	opts = append(opts, g.opts...)
	// g.policy has been validated, so New cannot fail.
	b, err := breaker.New(g.name+keySeparator+key, g.policy, opts...)
	if err != nil {
		panic("breaker: group holds an invalid policy: " + err.Error())
	}
	m.b = b
	m.lastUsed.Store(g.now())
	// New delivers no transition; a breaker created forced open is open from the start.
	m.state, m.since = breaker.Closed, g.wall()
	if g.policy.Mode == breaker.ModeForcedOpen {
		m.state = breaker.Open
	}
	g.members[key] = m
	g.count(m.state, 1)
	g.aggregate(nil, m.since)
	g.index.Store(key, m)
	return b
}

// evictOne evicts the least recently used evictable member, and reports whether there was
// one. Caller holds mu.
//
// It judges members by the states their transitions delivered to the Group, without a
// breaker's lock: an open circuit whose timeout has passed is still open here, which only
// keeps it longer. A call may open a member in the instant between the breaker's
// transition and its delivery to the Group; its outage is then forgotten, but the member
// was the one least recently asked for.
func (g *Group) evictOne() bool {
	var victim *groupMember
	for _, m := range g.members {
		if !m.evictable() {
			continue
		}
		if victim == nil || m.lastUsed.Load() < victim.lastUsed.Load() {
			victim = m
		}
	}
	if victim == nil {
		return false
	}
	victim.evicted = true
	delete(g.members, victim.key)
	g.index.Delete(victim.key)
	g.count(victim.state, -1)
	g.aggregate(nil, g.wall())
	return true
}

// evictable: closed, or held by a forced mode. Caller holds g.mu.
func (m *groupMember) evictable() bool {
	if mode := m.g.policy.Mode; mode == breaker.ModeForcedOpen || mode == breaker.ModeForcedClosed {
		return true
	}
	return m.state == breaker.Closed
}

// OnTransition keeps the Group's counts and aggregate state up to date with its members.
func (m *groupMember) OnTransition(t observe.Transition) {
	g := m.g
	g.mu.Lock()
	defer g.mu.Unlock()
	if m.evicted || t.Period <= m.period {
		return // evicted, or an older delivery that lost the race to a newer one
	}
	m.period = t.Period
	g.count(m.state, -1)
	g.count(t.To, 1)
	m.state, m.since = t.To, t.At
	g.aggregate(&t, t.At)
}

// count adds n to the tally of state s. Caller holds mu.
func (g *Group) count(s breaker.State, n int) {
	switch s {
	case breaker.Open:
		g.open += n
	case breaker.HalfOpen:
		g.halfOpen += n
	}
}

// aggregate moves the Group's state to what its counts say, recording t (nil: a member
// created or evicted) as what moved it. Caller holds mu.
func (g *Group) aggregate(t *observe.Transition, at time.Time) {
	s := breaker.Closed
	switch {
	case g.open > 0:
		s = breaker.Open
	case g.halfOpen > 0:
		s = breaker.HalfOpen
	}
	if s == g.state {
		return
	}
	g.state, g.since, g.reached = s, at, observe.Transition{}
	if t != nil {
		g.reached = *t
	}
}

// Update applies p to every member (each keeps its state, as [breaker.Breaker.Update] does) and
// to the members created later. An invalid policy is refused with an error naming the
// field, and the old one stays.
func (g *Group) Update(p breaker.Policy) error {
	if err := p.Validate(); err != nil {
		return err
	}
	g.updateMu.Lock()
	defer g.updateMu.Unlock()
	g.mu.Lock()
	g.policy = own(p)
	bs := g.breakersLocked(func(*groupMember) bool { return true })
	g.mu.Unlock()
	// Outside mu: Update delivers transitions to observers, the Group's own among them.
	var errs []error
	for _, b := range bs {
		if err := b.Update(p); err != nil {
			errs = append(errs, fmt.Errorf("breaker %q: %w", b.Name(), err))
		}
	}
	return errors.Join(errs...)
}

// breakersLocked returns the breakers of the members f selects. Caller holds mu.
func (g *Group) breakersLocked(f func(*groupMember) bool) []*breaker.Breaker {
	bs := make([]*breaker.Breaker, 0, len(g.members))
	for _, m := range g.members {
		if f(m) {
			bs = append(bs, m.b)
		}
	}
	return bs
}

// SetMaxKeys sets the bound on the Group's keys (n < 1 means the default, 1024) and evicts
// closed members at once, least recently used first, until the Group is within it or
// only open and half-open members are left over.
func (g *Group) SetMaxKeys(n int) {
	if n < 1 {
		n = defaultMaxKeys
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.maxKeys = n
	for len(g.members) > g.maxKeys && g.evictOne() {
	}
}

// GroupSummary is a Group at a glance: what a pod reports of it instead of one entry per
// key.
type GroupSummary struct {
	// Keys is how many keys the Group holds; Open and HalfOpen how many of them are in
	// each state.
	Keys, Open, HalfOpen int
	// Worst names at most breakerconfig.MaxWorstKeys keys (what a pod's report carries)
	// that are not closed: open first, most
	// recently opened first, then half-open, most recently first.
	Worst []string
	// State is Open while any key is open, else HalfOpen while any key is half-open, else
	// Closed; Since is when the Group reached it.
	State breaker.State
	Since time.Time
	// Reached is the member's transition that brought the Group to State (its Breaker is
	// "<group>/<key>"), or the zero Transition when no transition did: the Group started
	// Closed, or a member was created forced open.
	Reached observe.Transition
}

// Summary returns the Group at a glance. It first moves open members whose timeout has
// passed to half-open, as [breaker.Breaker.State] does, so that it does not report outages that
// time has ended.
func (g *Group) Summary() GroupSummary {
	g.mu.Lock()
	bs := g.breakersLocked(func(m *groupMember) bool { return m.state != breaker.Closed })
	g.mu.Unlock()
	for _, b := range bs {
		b.State() // delivers what time changed, to the Group's observer among others
	}

	g.mu.Lock()
	defer g.mu.Unlock()
	s := GroupSummary{
		Keys: len(g.members), Open: g.open, HalfOpen: g.halfOpen,
		State: g.state, Since: g.since, Reached: g.reached,
	}
	var worst []*groupMember
	for _, m := range g.members {
		if m.state != breaker.Closed {
			worst = append(worst, m)
		}
	}
	slices.SortFunc(worst, func(a, b *groupMember) int {
		if a.state != b.state {
			if a.state == breaker.Open {
				return -1
			}
			return 1
		}
		if c := b.since.Compare(a.since); c != 0 {
			return c
		}
		return cmp.Compare(a.key, b.key)
	})
	for _, m := range worst[:min(len(worst), breakerconfig.MaxWorstKeys)] {
		s.Worst = append(s.Worst, m.key)
	}
	return s
}
