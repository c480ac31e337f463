package registry

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
)

// Registry holds named breakers and breaker Groups, creates them on first use and
// hot-reloads their policies: a Group takes the policy configured for its name, as a
// breaker does. Breakers and Groups share one namespace, since each name is one
// CircuitBreaker: a name is either a breaker's or a Group's. It is safe for concurrent use.
type Registry struct {
	def  breaker.Policy
	opts []breaker.Option

	// applyMu serialises Apply, so that two reloads racing cannot leave breakers on the
	// older set of policies.
	applyMu sync.Mutex

	mu         sync.RWMutex
	configured map[string]breaker.Policy   // guarded by mu: the last good policy per configured name
	breakers   map[string]*breaker.Breaker // guarded by mu
	groups     map[string]*Group           // guarded by mu
	onCreate   []func(name string)         // guarded by mu
}

// New returns an empty registry. Breakers it creates get defaultPolicy unless Apply
// configured their name, and every one of opts (observers, clock, classifier).
func New(defaultPolicy breaker.Policy, opts ...breaker.Option) (*Registry, error) {
	if err := defaultPolicy.Validate(); err != nil {
		return nil, err
	}
	return &Registry{
		def:        own(defaultPolicy),
		opts:       slices.Clone(opts),
		configured: map[string]breaker.Policy{},
		breakers:   map[string]*breaker.Breaker{},
		groups:     map[string]*Group{},
	}, nil
}

// Get returns the breaker named name, creating it on first use with the policy configured
// for name, or else the default one. It panics if name is a Group's: one name cannot be
// both.
func (r *Registry) Get(name string) *breaker.Breaker {
	r.mu.RLock()
	b, ok := r.breakers[name]
	r.mu.RUnlock()
	if ok {
		return b
	}
	b, created := r.newBreaker(name)
	announce(name, created)
	return b
}

// newBreaker returns the breaker named name, creating it, and the creation hooks to call
// if it did.
func (r *Registry) newBreaker(name string) (*breaker.Breaker, []func(string)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if b, ok := r.breakers[name]; ok {
		return b, nil
	}
	if _, ok := r.groups[name]; ok {
		panic(fmt.Sprintf("breaker: registry: %q is a Group; use Registry.Group(%[1]q)", name))
	}
	p := r.policyLocked(name)
	// Every policy here has been validated, so New cannot fail.
	b, err := breaker.New(name, p, r.opts...)
	if err != nil {
		panic("breaker: registry holds an invalid policy: " + err.Error())
	}
	r.breakers[name] = b
	return b, r.onCreate
}

// OnCreate registers f to be called each time the registry creates a breaker or a Group,
// with its name, so that a program connecting the registry to something else (the
// Kubernetes agent, say) learns of it without polling. f runs in the goroutine of the Get
// or Group call that created it, once Lookup or LookupGroup finds it, and with no lock of
// the registry held, so it may call back into the registry; that call waits for f, so f
// should return quickly. The breakers a Group creates for its keys are the Group's, and
// are not announced.
func (r *Registry) OnCreate(f func(name string)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// A fresh slice, so that a creation announcing the earlier hooks outside mu reads a
	// slice nobody appends to.
	r.onCreate = append(slices.Clip(r.onCreate), f)
}

func announce(name string, hooks []func(string)) {
	for _, f := range hooks {
		f(name)
	}
}

// policyLocked is the policy of name: configured, or else the default. Caller holds mu.
func (r *Registry) policyLocked(name string) breaker.Policy {
	if p, ok := r.configured[name]; ok {
		return p
	}
	return r.def
}

// Group returns the breaker Group named name, creating it on first use with the policy
// configured for name, or else the default one, and the registry's options for its
// members; set its bound with [Group.SetMaxKeys]. Apply reaches the Group as it reaches a
// breaker. It panics if name is a breaker's (one name cannot be both) or contains
// "/", which separates a Group's name from its keys.
func (r *Registry) Group(name string) *Group {
	r.mu.RLock()
	g, ok := r.groups[name]
	r.mu.RUnlock()
	if ok {
		return g
	}
	g, created := r.newGroup(name)
	announce(name, created)
	return g
}

// newGroup returns the Group named name, creating it, and the creation hooks to call if
// it did.
func (r *Registry) newGroup(name string) (*Group, []func(string)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if g, ok := r.groups[name]; ok {
		return g, nil
	}
	if _, ok := r.breakers[name]; ok {
		panic(fmt.Sprintf("breaker: registry: %q is a breaker; a Group needs a name of its own", name))
	}
	g, err := NewGroup(name, r.policyLocked(name), r.opts...)
	if err != nil {
		panic("breaker: registry: " + err.Error())
	}
	r.groups[name] = g
	return g, r.onCreate
}

// LookupGroup returns the Group named name if it exists, without creating it.
func (r *Registry) LookupGroup(name string) (*Group, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	g, ok := r.groups[name]
	return g, ok
}

// Lookup returns the breaker named name if it exists, without creating it.
func (r *Registry) Lookup(name string) (*breaker.Breaker, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	b, ok := r.breakers[name]
	return b, ok
}

// Apply hot-reloads the full configured set of policies: each valid entry is applied to its
// breaker with Update (state kept) and remembered for a breaker created later; a name absent
// from policies reverts to the default policy. An invalid entry is refused for that name only,
// which keeps its last good policy, and is reported in the returned error (errors.Join of one
// error per refused name, each naming the breaker and wrapping what [breaker.Policy.Validate]
// said, which names the field).
func (r *Registry) Apply(policies map[string]breaker.Policy) error {
	r.applyMu.Lock()
	defer r.applyMu.Unlock()

	var errs []error
	names := make([]string, 0, len(policies))
	for name := range policies {
		names = append(names, name)
	}
	slices.Sort(names)

	r.mu.Lock()
	next := make(map[string]breaker.Policy, len(policies))
	refused := map[string]bool{}
	for _, name := range names {
		p := policies[name]
		if err := p.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("breaker %q: %w", name, err))
			refused[name] = true
			if old, ok := r.configured[name]; ok {
				next[name] = old
			}
			continue
		}
		next[name] = own(p)
	}
	r.configured = next
	type update struct {
		name   string
		update func(breaker.Policy) error
		p      breaker.Policy
	}
	updates := make([]update, 0, len(r.breakers)+len(r.groups))
	for name, b := range r.breakers {
		if !refused[name] {
			updates = append(updates, update{name, b.Update, r.policyLocked(name)})
		}
	}
	for name, g := range r.groups {
		if !refused[name] {
			updates = append(updates, update{name, g.Update, r.policyLocked(name)})
		}
	}
	r.mu.Unlock()

	// Outside mu: Update delivers transitions to observers, which may call back into the
	// registry.
	for _, u := range updates {
		if err := u.update(u.p); err != nil {
			errs = append(errs, fmt.Errorf("breaker %q: %w", u.name, err))
		}
	}
	return errors.Join(errs...)
}

// Each calls f for every existing breaker, in name order, without holding the registry's
// lock, so f may call Get.
func (r *Registry) Each(f func(*breaker.Breaker)) {
	r.mu.RLock()
	bs := make([]*breaker.Breaker, 0, len(r.breakers))
	for _, b := range r.breakers {
		bs = append(bs, b)
	}
	r.mu.RUnlock()
	slices.SortFunc(bs, func(a, b *breaker.Breaker) int {
		switch {
		case a.Name() < b.Name():
			return -1
		case a.Name() > b.Name():
			return 1
		}
		return 0
	})
	for _, b := range bs {
		f(b)
	}
}

// Names returns the names of the existing breakers and Groups, sorted: the registry's one
// namespace (Lookup and LookupGroup tell which a name is).
func (r *Registry) Names() []string {
	r.mu.RLock()
	names := make([]string, 0, len(r.breakers)+len(r.groups))
	for n := range r.breakers {
		names = append(names, n)
	}
	for n := range r.groups {
		names = append(names, n)
	}
	r.mu.RUnlock()
	slices.Sort(names)
	return names
}
