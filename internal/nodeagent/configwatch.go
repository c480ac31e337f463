package nodeagent

import (
	"context"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// watchBackoff paces a namespace watch's re-lists while the API server is away, as the
// pods' own watch does (pkg/breaker/kube): a few seconds, not client-go's minute.
var watchBackoff = wait.Backoff{Duration: 250 * time.Millisecond, Factor: 2, Jitter: 0.5, Steps: 1 << 20, Cap: 8 * time.Second}

// configWatches holds one watch per namespace whose pods stream their config: on that
// namespace's fusebox-breakers ConfigMap alone (field-selected on the name, so the agent
// needs read access to those objects only), shared by every stream of the namespace, and
// stopped when the last one ends. The API server holds one watch per namespace per node,
// not one per pod.
type configWatches struct {
	client  kubernetes.Interface
	agentID string
	log     *slog.Logger

	mu      sync.Mutex
	ctx     context.Context // guarded by mu: the agent's work; nil until start
	byNS    map[string]*nsConfig
	started atomic.Int64
}

func newConfigWatches(cs kubernetes.Interface, agentID string, log *slog.Logger) *configWatches {
	return &configWatches{client: cs, agentID: agentID, log: log, byNS: map[string]*nsConfig{}}
}

// start gives the watches the context they run in.
func (w *configWatches) start(ctx context.Context) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ctx = ctx
}

// stopAll stops every watch: the agent is stopping.
func (w *configWatches) stopAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for ns, c := range w.byNS {
		c.stop()
		delete(w.byNS, ns)
	}
}

func (w *configWatches) counts() (watching, started int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return int64(len(w.byNS)), w.started.Load()
}

// acquire returns the namespace's watch, starting it for the first stream; every acquire
// is followed by a release.
func (w *configWatches) acquire(ns string) *nsConfig {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := w.byNS[ns]
	if c == nil {
		ctx, cancel := context.WithCancel(w.ctx)
		c = &nsConfig{namespace: ns, agentID: w.agentID, stop: cancel, changed: make(chan struct{}), log: w.log}
		w.byNS[ns] = c
		w.started.Add(1)
		go c.run(ctx, w.client)
	}
	c.streams++
	return c
}

// release ends one stream's use of the namespace's watch, stopping it after the last.
func (w *configWatches) release(c *nsConfig) {
	w.mu.Lock()
	defer w.mu.Unlock()
	c.streams--
	if c.streams == 0 && w.byNS[c.namespace] == c {
		c.stop()
		delete(w.byNS, c.namespace)
	}
}

// snapshot returns the namespace's config as it stands: from its running watch, or read
// once from the API server when no stream keeps one running.
func (w *configWatches) snapshot(ctx context.Context, ns string) (breakerconfig.ConfigSnapshot, error) {
	w.mu.Lock()
	c := w.byNS[ns]
	w.mu.Unlock()
	if c != nil {
		if s, _, ok := c.current(); ok {
			return s, nil
		}
	}
	cm, err := w.client.CoreV1().ConfigMaps(ns).Get(ctx, breakerconfig.ConfigMapName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return breakerconfig.ConfigSnapshot{Agent: w.agentID}, nil
	case err != nil:
		return breakerconfig.ConfigSnapshot{}, err
	}
	return breakerconfig.ConfigSnapshot{Agent: w.agentID, Exists: true, Data: cm.Data}, nil
}

// nsConfig is one namespace's watch and the config it last saw.
type nsConfig struct {
	namespace string
	agentID   string
	log       *slog.Logger
	stop      context.CancelFunc
	streams   int // guarded by configWatches.mu

	mu      sync.Mutex
	synced  bool // guarded by mu: the first list has been seen
	exists  bool // guarded by mu
	data    map[string]string
	version string        // guarded by mu: the ConfigMap's resourceVersion
	changed chan struct{} // guarded by mu: closed, and replaced, on every change
}

// current returns the config as it stands, a channel closed on its next change, and
// whether the first list has been seen (until then there is nothing to say).
func (c *nsConfig) current() (breakerconfig.ConfigSnapshot, <-chan struct{}, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := breakerconfig.ConfigSnapshot{Agent: c.agentID, Exists: c.exists, Data: c.data}
	return s, c.changed, c.synced
}

// set records the ConfigMap's new state, waking the streams when it changed.
func (c *nsConfig) set(exists bool, version string, data map[string]string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.synced && c.exists == exists && c.version == version && maps.Equal(c.data, data) {
		return
	}
	c.synced, c.exists, c.version, c.data = true, exists, version, data
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *nsConfig) run(ctx context.Context, client kubernetes.Interface) {
	inner := cache.NewFilteredListWatchFromClient(client.CoreV1().RESTClient(), "configmaps", c.namespace, func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", breakerconfig.ConfigMapName).String()
	})
	backoff := watchBackoff
	r := cache.NewReflectorWithOptions(inner, &corev1.ConfigMap{}, &configMapStore{c: c}, cache.ReflectorOptions{
		Name: c.namespace + "/" + breakerconfig.ConfigMapName, Backoff: &backoff,
	})
	// The reflector logs every failed retry through klog as an error; the agent's log
	// gets them at debug level.
	ctx = klog.NewContext(ctx, logr.FromSlogHandler(debugOnly{c.log.With("namespace", c.namespace).Handler()}))
	r.RunWithContext(ctx)
}

// configMapStore is the reflector's store for one namespace: it keeps nothing but hands
// what it is given to the namespace's nsConfig.
type configMapStore struct{ c *nsConfig }

var _ cache.ReflectorStore = (*configMapStore)(nil)

func (s *configMapStore) Add(obj any) error    { s.put(obj); return nil }
func (s *configMapStore) Update(obj any) error { s.put(obj); return nil }
func (s *configMapStore) Delete(any) error     { s.c.set(false, "", nil); return nil }
func (s *configMapStore) Resync() error        { return nil }

func (s *configMapStore) Replace(items []any, _ string) error {
	if len(items) == 0 {
		s.c.set(false, "", nil)
		return nil
	}
	s.put(items[0])
	return nil
}

func (s *configMapStore) put(obj any) {
	if cm, ok := obj.(*corev1.ConfigMap); ok {
		s.c.set(true, cm.ResourceVersion, cm.Data)
	}
}

// debugOnly passes every record on at debug level.
type debugOnly struct{ slog.Handler }

func (h debugOnly) Enabled(ctx context.Context, _ slog.Level) bool {
	return h.Handler.Enabled(ctx, slog.LevelDebug)
}

func (h debugOnly) Handle(ctx context.Context, r slog.Record) error {
	r.Level = slog.LevelDebug
	return h.Handler.Handle(ctx, r)
}

func (h debugOnly) WithAttrs(as []slog.Attr) slog.Handler { return debugOnly{h.Handler.WithAttrs(as)} }
func (h debugOnly) WithGroup(name string) slog.Handler    { return debugOnly{h.Handler.WithGroup(name)} }
