package kube

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// watchBackoff paces the re-lists while the API server is away. client-go's default climbs
// to 30–60s, so a pod would pick up the config up to a minute after an outage ends; one
// field-selected ConfigMap per pod is cheap enough to retry every few seconds instead.
var watchBackoff = wait.Backoff{Duration: 250 * time.Millisecond, Factor: 2, Jitter: 0.5, Steps: 1 << 20, Cap: 8 * time.Second}

// apiSource watches the namespace's fusebox-breakers ConfigMap, and nothing else: the list
// and watch carry a field selector on the name, so a pod needs read access to that one
// object only and the API server sends it nothing else. It is a single-object informer
// without the informer's cache and event queue: the reflector feeds the object straight
// into a store (configMapStore) that applies it.
type apiSource struct {
	client    kubernetes.Interface
	namespace string
	apply     func(map[string]string)
	log       *slog.Logger

	mu      sync.Mutex
	failing bool // guarded by mu: the last list or watch failed; logged once per outage
}

func (s *apiSource) run(ctx context.Context) {
	inner := cache.NewFilteredListWatchFromClient(s.client.CoreV1().RESTClient(), "configmaps", s.namespace,
		func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", breakerconfig.ConfigMapName).String()
		})
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			obj, err := inner.ListWithContext(ctx, o)
			s.observe(ctx, err)
			return obj, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			w, err := inner.WatchWithContext(ctx, o)
			s.observe(ctx, err)
			return w, err
		},
	}
	backoff := watchBackoff
	r := cache.NewReflectorWithOptions(lw, &corev1.ConfigMap{}, &configMapStore{src: s}, cache.ReflectorOptions{
		Name:    breakerconfig.ConfigMapName,
		Backoff: &backoff,
	})
	// The reflector logs through klog, and logs every failed retry as an error; route it
	// to our logger at debug level, since observe says what matters once per outage.
	ctx = klog.NewContext(ctx, logr.FromSlogHandler(debugOnly{s.log.Handler()}))
	r.RunWithContext(ctx)
}

// observe logs the first failure of an outage and the recovery after it. The breakers keep
// their policies meanwhile (the defaults, if no config ever arrived).
func (s *apiSource) observe(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return // shutting down
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case err != nil && !s.failing:
		s.failing = true
		s.log.Warn("Cannot read the breaker ConfigMap; breakers keep their current policies, retrying",
			"configMap", breakerconfig.ConfigMapName, "namespace", s.namespace, "error", err)
	case err == nil && s.failing:
		s.failing = false
		s.log.Info("Reading the breaker ConfigMap again", "configMap", breakerconfig.ConfigMapName)
	}
}

// configMapStore is the reflector's store: it holds nothing, and applies what it is given.
// The reflector calls it from one goroutine at a time; mu is for the race detector's
// peace of mind should that change.
type configMapStore struct {
	src *apiSource

	mu      sync.Mutex
	synced  bool   // guarded by mu: something was applied
	present bool   // guarded by mu: the ConfigMap exists
	version string // guarded by mu: its resourceVersion when last applied
}

var _ cache.ReflectorStore = (*configMapStore)(nil)

func (st *configMapStore) Add(obj any) error    { st.set(obj); return nil }
func (st *configMapStore) Update(obj any) error { st.set(obj); return nil }
func (st *configMapStore) Delete(any) error     { st.clear(); return nil }
func (st *configMapStore) Resync() error        { return nil }

// Replace is the result of a (re-)list: the ConfigMap, or nothing.
func (st *configMapStore) Replace(items []any, _ string) error {
	if len(items) == 0 {
		st.clear()
		return nil
	}
	st.set(items[0])
	return nil
}

// set applies a ConfigMap, unless it is the version already applied (a re-list after a
// broken watch finds the same one).
func (st *configMapStore) set(obj any) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.present && cm.ResourceVersion == st.version {
		return
	}
	st.synced, st.present, st.version = true, true, cm.ResourceVersion
	st.src.apply(cm.Data)
}

// clear applies the absence of the ConfigMap: every breaker on its default policy.
func (st *configMapStore) clear() {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.synced && !st.present {
		return
	}
	if st.present {
		st.src.log.Info("Breaker ConfigMap deleted; breakers back to their default policies",
			"configMap", breakerconfig.ConfigMapName, "namespace", st.src.namespace)
	} else {
		st.src.log.Info("No breaker ConfigMap in the namespace yet; breakers run on their default policies",
			"configMap", breakerconfig.ConfigMapName, "namespace", st.src.namespace)
	}
	st.synced, st.present, st.version = true, false, ""
	st.src.apply(nil)
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
