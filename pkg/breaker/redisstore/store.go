package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/observe"
	"github.com/fusebox-dev/fusebox/pkg/breaker/registry"
)

// Defaults of the options.
const (
	DefaultPrefix       = "fusebox:verdict:"
	DefaultTTL          = 24 * time.Hour
	DefaultPollInterval = 2 * time.Second
	DefaultOpTimeout    = time.Second
)

// ErrClosed is returned by Attach on a closed Store.
var ErrClosed = errors.New("redisstore: store closed")

// Option configures a [Store].
type Option func(*config)

type config struct {
	prefix       string
	application  string
	appSet       bool // WithApplication was given, even with ""
	channel      string
	ttl          time.Duration
	pollInterval time.Duration
	opTimeout    time.Duration
	logger       *slog.Logger
}

// WithPrefix sets the prefix of every key the store writes ([DefaultPrefix] by default).
// Keys are prefix + application + ":" + key (see [WithApplication]); processes share a
// verdict when the three are the same.
func WithPrefix(prefix string) Option { return func(c *config) { c.prefix = prefix } }

// WithApplication names the application whose breakers the store shares. It is part of
// every key, prefix + application + ":" + key, so that two applications on one Redis that
// both name a breaker "db" do not share a verdict by accident, and of the default channel.
// By default it is the program's name (the base name of its executable), after the
// namespace and a slash when it runs in a Kubernetes pod ("shop/checkout"): replicas of one
// program share, other programs and other namespaces do not. Set it when that is not the
// application's identity, for example when every image's entrypoint is called "/app".
// WithApplication("") leaves it out of the keys, which are then prefix + key.
func WithApplication(name string) Option {
	return func(c *config) { c.application, c.appSet = name, true }
}

// DefaultApplication is the application a store names in its keys without
// [WithApplication]: the program's name, after "<namespace>/" inside a Kubernetes pod. The
// namespace is read from the POD_NAMESPACE environment variable (commonly set from the
// downward API), or else from the pod's service account.
func DefaultApplication() string {
	name := ""
	if exe, err := os.Executable(); err == nil {
		name = filepath.Base(exe)
	} else if len(os.Args) > 0 {
		name = filepath.Base(os.Args[0])
	}
	if ns := podNamespace(); ns != "" {
		return ns + "/" + name
	}
	return name
}

// serviceAccountNamespace is where Kubernetes mounts the pod's namespace.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

func podNamespace() string {
	if ns := os.Getenv(breakerconfig.EnvNamespace); ns != "" {
		return ns
	}
	b, err := os.ReadFile(serviceAccountNamespace)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// WithChannel sets the pub/sub channel verdicts are announced on; by default it is the
// key prefix, application included, without its trailing colon
// ("fusebox:verdict:shop/checkout").
func WithChannel(channel string) Option { return func(c *config) { c.channel = channel } }

// WithTTL sets how long a shared verdict outlives its last change ([DefaultTTL]). Keep it
// well above the breakers' open timeout: a verdict that expires early is simply not shared
// any more, and the next transition writes it again.
func WithTTL(ttl time.Duration) Option { return func(c *config) { c.ttl = ttl } }

// WithPollInterval sets how often every shared verdict is re-read, the safety net for
// announcements lost while disconnected, and how soon the store retries an unreachable
// Redis ([DefaultPollInterval]).
func WithPollInterval(d time.Duration) Option { return func(c *config) { c.pollInterval = d } }

// WithOpTimeout bounds each Redis round trip the store makes ([DefaultOpTimeout]). No call
// of a breaker ever waits for one.
func WithOpTimeout(d time.Duration) Option { return func(c *config) { c.opTimeout = d } }

// WithLogger sets where the store reports Redis failures and garbage; slog.Default() by
// default.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// Stats are a store's counters since New.
type Stats struct {
	// Healthy is false until the store has reached Redis, and while it cannot.
	Healthy bool
	// Errors counts failed Redis round trips; Outages the times Redis became unreachable.
	Errors, Outages uint64
	// Garbage counts values under the store's keys, and messages on its channel, that were
	// ignored because they are not verdicts this package wrote.
	Garbage uint64
	// Published counts verdicts this store wrote, Conflicts the writes that lost a race or
	// came from an outdated view, Adopted the remote verdicts applied to a breaker.
	Published, Conflicts, Adopted uint64
	// LastError is the last Redis failure, if any.
	LastError error
}

// Store shares the verdicts of breakers between processes through Redis: the state and when
// it was reached, never counters (neither the window's nor the half-open probes').
//
// A breaker takes part when it is created with [breaker.WithObserver](store) and attached
// with [Store.Attach] (or [Store.NewBreaker], [Store.AttachRegistry]). Its transitions are
// then published asynchronously by a compare-and-set on the verdict's epoch, and verdicts
// published elsewhere reach it through pub/sub, or at the latest by the next poll, and are
// applied with [breaker.Breaker.Adopt]. Nothing the store does is on a breaker's call path:
// when Redis is slow or down, breakers decide alone and the store catches up when it returns.
//
// A Store is safe for concurrent use. Close it to stop its goroutines.
type Store struct {
	client redis.UniversalClient
	cfg    config
	writer string // written next to each verdict, to tell who published it

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	wake   chan struct{} // capacity 1: a signal that pending work exists
	calls  chan func()   // run on the loop goroutine; tests use it as a barrier
	closed atomic.Bool

	mu         sync.Mutex
	byName     map[string]*binding   // guarded by mu
	byKey      map[string][]*binding // guarded by mu
	registries []registration        // guarded by mu
	pending    []*binding            // guarded by mu; a binding is in it at most once (binding.queued)
	unknown    map[string]struct{}   // guarded by mu; names that transitioned before being attached

	health                        atomic.Int32 // healthUnknown, healthUp, healthDown
	errs, outages, garbage        atomic.Uint64
	published, conflicts, adopted atomic.Uint64
	lastErr                       atomic.Pointer[error]
	garbageKeys                   map[string]string // loop-owned: keys reported as garbage, and why
	lastGarbageMessageLog         time.Time         // loop-owned
}

const (
	healthUnknown int32 = iota
	healthUp
	healthDown
)

type registration struct {
	reg *registry.Registry
	key func(name string) string
}

// binding is one attached breaker. Its fields after the atomics are owned by the loop
// goroutine.
type binding struct {
	b   *breaker.Breaker
	key string // the full Redis key

	queued atomic.Bool // in Store.pending

	read     bool   // reconciled with Redis at least once
	unsynced bool   // local news that could not be published yet (Redis unreachable)
	refused  bool   // the breaker refused the shared verdict as older than its own state
	known    uint64 // epoch of the last shared verdict seen or written; 0: none
	shared   shared // that verdict, when has
	has      bool
}

var _ observe.Observer = (*Store)(nil)

// New returns a store sharing verdicts through client, which the caller keeps ownership
// of (Close does not close it). New does not contact Redis: an unreachable server is not an
// error, and the store joins it when it can.
func New(client redis.UniversalClient, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: nil client")
	}
	cfg := config{
		prefix:       DefaultPrefix,
		ttl:          DefaultTTL,
		pollInterval: DefaultPollInterval,
		opTimeout:    DefaultOpTimeout,
	}
	for _, o := range opts {
		o(&cfg)
	}
	switch {
	case cfg.ttl < time.Millisecond:
		return nil, fmt.Errorf("redisstore: TTL %v is below a millisecond", cfg.ttl)
	case cfg.pollInterval <= 0:
		return nil, fmt.Errorf("redisstore: poll interval %v is not positive", cfg.pollInterval)
	case cfg.opTimeout <= 0:
		return nil, fmt.Errorf("redisstore: operation timeout %v is not positive", cfg.opTimeout)
	}
	if !cfg.appSet {
		cfg.application = DefaultApplication()
	}
	if cfg.application != "" {
		// From here on, prefix is everything a key starts with.
		cfg.prefix += cfg.application + ":"
	}
	if cfg.channel == "" {
		cfg.channel = strings.TrimSuffix(cfg.prefix, ":")
		if cfg.channel == "" {
			cfg.channel = strings.TrimSuffix(DefaultPrefix, ":")
		}
	}
	if cfg.logger == nil {
		cfg.logger = slog.Default()
	}
	s := &Store{
		client:      client,
		cfg:         cfg,
		writer:      writerID(),
		done:        make(chan struct{}),
		wake:        make(chan struct{}, 1),
		calls:       make(chan func()),
		byName:      map[string]*binding{},
		byKey:       map[string][]*binding{},
		unknown:     map[string]struct{}{},
		garbageKeys: map[string]string{},
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	go s.loop()
	return s, nil
}

func writerID() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// Attach shares b's verdict with every breaker attached under the same key (and prefix) in
// any process. b should have been created with [breaker.WithObserver](s): without it, its
// transitions still reach Redis, but only at the next poll. Attaching a breaker again is a
// no-op; attaching another one under a name already attached is an error, since transitions
// name their breaker.
func (s *Store) Attach(b *breaker.Breaker, key string) error {
	if b == nil {
		return errors.New("redisstore: nil breaker")
	}
	if key == "" {
		return fmt.Errorf("redisstore: empty key for breaker %q", b.Name())
	}
	if s.closed.Load() {
		return ErrClosed
	}
	s.mu.Lock()
	if bd, ok := s.byName[b.Name()]; ok {
		s.mu.Unlock()
		if bd.b == b {
			return nil
		}
		return fmt.Errorf("redisstore: another breaker named %q is already attached", b.Name())
	}
	s.attachLocked(b, key)
	s.mu.Unlock()
	s.signal()
	return nil
}

// Key returns the Redis key the store keeps a breaker's verdict under when it is attached
// under key: the prefix, the application and key.
func (s *Store) Key(key string) string { return s.cfg.prefix + key }

func (s *Store) attachLocked(b *breaker.Breaker, key string) {
	bd := &binding{b: b, key: s.Key(key)}
	s.byName[b.Name()] = bd
	s.byKey[bd.key] = append(s.byKey[bd.key], bd)
	bd.queued.Store(true)
	s.pending = append(s.pending, bd)
}

// NewBreaker creates a breaker (see [breaker.New]) whose verdict is shared under its name.
func (s *Store) NewBreaker(name string, p breaker.Policy, opts ...breaker.Option) (*breaker.Breaker, error) {
	opts = append(opts[:len(opts):len(opts)], breaker.WithObserver(s))
	b, err := breaker.New(name, p, opts...)
	if err != nil {
		return nil, err
	}
	if err := s.Attach(b, name); err != nil {
		return nil, err
	}
	return b, nil
}

// AttachRegistry shares the verdict of every breaker r holds now or creates later, each
// under key(name), or under its name when key is nil. Create r with
// [breaker.WithObserver](s) among its options (as [Store.NewRegistry] does), so that local
// transitions are published at once.
func (s *Store) AttachRegistry(r *registry.Registry, key func(name string) string) {
	if key == nil {
		key = func(name string) string { return name }
	}
	s.mu.Lock()
	s.registries = append(s.registries, registration{reg: r, key: key})
	s.mu.Unlock()
	s.scanRegistries()
	s.signal()
}

// NewRegistry creates a registry (see [registry.New]) whose breakers share their
// verdicts, each under its name.
func (s *Store) NewRegistry(def breaker.Policy, opts ...breaker.Option) (*registry.Registry, error) {
	opts = append(opts[:len(opts):len(opts)], breaker.WithObserver(s))
	r, err := registry.New(def, opts...)
	if err != nil {
		return nil, err
	}
	s.AttachRegistry(r, nil)
	return r, nil
}

// scanRegistries attaches the breakers the registries created since the last scan.
func (s *Store) scanRegistries() {
	s.mu.Lock()
	regs := s.registries
	s.mu.Unlock()
	for _, r := range regs {
		r.reg.Each(func(b *breaker.Breaker) {
			s.mu.Lock()
			if _, ok := s.byName[b.Name()]; !ok && !s.closed.Load() {
				s.attachLocked(b, r.key(b.Name()))
			}
			s.mu.Unlock()
		})
	}
}

// OnTransition implements [observe.Observer]: it queues the breaker's new verdict for
// publishing and returns at once. It never does I/O, and it ignores transitions the store
// itself caused by adopting a remote verdict.
func (s *Store) OnTransition(t observe.Transition) {
	if t.Reason == breakerconfig.ReasonAdopted || s.closed.Load() {
		return
	}
	s.mu.Lock()
	bd, ok := s.byName[t.Breaker]
	switch {
	case !ok:
		if len(s.registries) > 0 {
			s.unknown[t.Breaker] = struct{}{}
		}
	default:
		if !bd.queued.Swap(true) {
			s.pending = append(s.pending, bd)
		}
	}
	s.mu.Unlock()
	s.signal()
}

func (s *Store) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Healthy reports whether the store last reached Redis.
func (s *Store) Healthy() bool { return s.health.Load() == healthUp }

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	st := Stats{
		Healthy:   s.Healthy(),
		Errors:    s.errs.Load(),
		Outages:   s.outages.Load(),
		Garbage:   s.garbage.Load(),
		Published: s.published.Load(),
		Conflicts: s.conflicts.Load(),
		Adopted:   s.adopted.Load(),
	}
	if p := s.lastErr.Load(); p != nil {
		st.LastError = *p
	}
	return st
}

// Close stops the store's goroutines and waits for them. Attached breakers keep working,
// deciding alone. Close does not close the Redis client.
func (s *Store) Close() error {
	if s.closed.CompareAndSwap(false, true) {
		s.cancel()
	}
	<-s.done
	return nil
}
