package certs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// Defaults of Options.
const (
	DefaultCAValidity       = 365 * 24 * time.Hour
	DefaultCertValidity     = 90 * 24 * time.Hour
	DefaultPropagationDelay = time.Minute
	DefaultResyncInterval   = 10 * time.Minute
)

// Options configure a Manager.
type Options struct {
	// Namespace and SecretName locate the Secret that holds the certificates.
	// Required.
	Namespace, SecretName string
	// DNSNames are the serving certificate's subject alternative names; an
	// entry that parses as an IP address is an IP SAN. Required: for a Service
	// s in namespace n, ServiceDNSNames(s, n).
	DNSNames []string
	// CertDir is the webhook server's certificate directory, where the serving
	// certificate is written as CertName and KeyName (default tls.crt and
	// tls.key). Required.
	CertDir, CertName, KeyName string
	// MutatingWebhookConfigurations and ValidatingWebhookConfigurations name the
	// configurations whose every webhook's caBundle the Rotator sets. One that
	// does not exist is skipped until it does.
	MutatingWebhookConfigurations, ValidatingWebhookConfigurations []string
	// CAValidity and CertValidity are how long a CA and a serving certificate
	// are valid; each is renewed at two thirds of its life. Defaults
	// DefaultCAValidity and DefaultCertValidity.
	CAValidity, CertValidity time.Duration
	// PropagationDelay is how long a new CA is trusted (in the caBundles)
	// before it signs; it must be under a third of CAValidity. Default
	// DefaultPropagationDelay.
	PropagationDelay time.Duration
	// ResyncInterval is the longest the Rotator goes without checking the
	// Secret and the caBundles, besides reacting to their changes. Default
	// DefaultResyncInterval.
	ResyncInterval time.Duration
	// Logger defaults to a discarding logger.
	Logger logr.Logger
	// Now is the clock; nil means time.Now. Timers run on real time regardless:
	// this is for tests that judge a bundle at a given instant.
	Now func() time.Time
}

// ServiceDNSNames are the names by which a Service is reached inside the
// cluster: what the API server dials for a webhook whose clientConfig names
// the Service is <service>.<namespace>.svc.
func ServiceDNSNames(service, namespace string) []string {
	return []string{
		service,
		service + "." + namespace,
		service + "." + namespace + ".svc",
		service + "." + namespace + ".svc.cluster.local",
	}
}

// Manager issues and rotates the webhook server's certificates; see the
// package documentation. Its methods are safe for concurrent use.
type Manager struct {
	opts   Options
	policy policy
	client kubernetes.Interface
	log    logr.Logger

	mu      sync.Mutex
	missing map[string]bool // guarded by mu: webhook configurations last seen missing
}

// New returns a Manager that reaches the API server through client.
func New(client kubernetes.Interface, o Options) (*Manager, error) {
	if o.CAValidity == 0 {
		o.CAValidity = DefaultCAValidity
	}
	if o.CertValidity == 0 {
		o.CertValidity = DefaultCertValidity
	}
	if o.PropagationDelay == 0 {
		o.PropagationDelay = DefaultPropagationDelay
	}
	if o.ResyncInterval == 0 {
		o.ResyncInterval = DefaultResyncInterval
	}
	if o.CertName == "" {
		o.CertName = corev1.TLSCertKey
	}
	if o.KeyName == "" {
		o.KeyName = corev1.TLSPrivateKeyKey
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger.GetSink() == nil {
		o.Logger = logr.Discard()
	}
	switch {
	case o.Namespace == "" || o.SecretName == "":
		return nil, errors.New("certs: Options.Namespace and Options.SecretName are required")
	case len(o.DNSNames) == 0:
		return nil, errors.New("certs: Options.DNSNames is empty: the serving certificate must name the webhook Service")
	case o.CertDir == "":
		return nil, errors.New("certs: Options.CertDir is required")
	case o.CAValidity < 0 || o.CertValidity < 0 || o.PropagationDelay < 0 || o.ResyncInterval < 0:
		return nil, errors.New("certs: durations must not be negative")
	case o.PropagationDelay >= o.CAValidity/3:
		return nil, fmt.Errorf("certs: PropagationDelay %s must be under a third of CAValidity %s, the time a renewed CA has left", o.PropagationDelay, o.CAValidity)
	}
	return &Manager{
		opts: o,
		policy: policy{
			names:            parseSANs(o.DNSNames),
			caValidity:       o.CAValidity,
			certValidity:     o.CertValidity,
			propagationDelay: o.PropagationDelay,
		},
		client:  client,
		log:     o.Logger,
		missing: map[string]bool{},
	}, nil
}

// Bootstrap makes sure the Secret holds a serving certificate and writes it
// into CertDir. Every replica runs it before its webhook server starts (which
// needs the files). It creates the Secret if there is none and repairs one
// whose serving certificate is unusable, optimistically, so that replicas
// racing here end up with the same certificate; renewal and the caBundles are
// the Rotator's.
func (m *Manager) Bootstrap(ctx context.Context) error {
	var lastErr error
	for range 5 {
		secret, err := m.getSecret(ctx)
		if err != nil {
			return err
		}
		cur := parseBundle(secretData(secret))
		if secret != nil && cur.usable(m.opts.Now()) == nil {
			return m.writeFiles(cur)
		}
		next, why, _, err := m.policy.plan(cur, m.opts.Now())
		if err != nil {
			return err
		}
		if err := m.putSecret(ctx, secret, next); apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
			lastErr = err // another replica got there first: read what it wrote
			continue
		} else if err != nil {
			return err
		}
		m.log.Info("Issued the webhook serving certificate", "secret", m.secretRef(), "why", why, "notAfter", next.leaf.cert.NotAfter)
		return m.writeFiles(next)
	}
	return fmt.Errorf("certs: bootstrap kept racing other writers of Secret %s: %w", m.secretRef(), lastErr)
}

// Rotator returns the runnable that renews the certificates and keeps the
// caBundles set. It needs leader election: with several replicas, one rotates.
func (m *Manager) Rotator() *Rotator { return &Rotator{m: m} }

// Syncer returns the runnable that keeps CertDir in step with the Secret. Every
// replica runs one.
func (m *Manager) Syncer() *Syncer { return &Syncer{m: m} }

// Rotator is the leader's part of a Manager.
type Rotator struct{ m *Manager }

var (
	_ manager.Runnable               = (*Rotator)(nil)
	_ manager.LeaderElectionRunnable = (*Rotator)(nil)
)

// NeedLeaderElection implements manager.LeaderElectionRunnable: true.
func (*Rotator) NeedLeaderElection() bool { return true }

// Start reconciles until ctx is done: at each renewal time, whenever the Secret
// or a webhook configuration changes, and at least every ResyncInterval.
// Errors are logged and retried with backoff; Start returns nil when ctx is
// done.
func (r *Rotator) Start(ctx context.Context) error {
	m := r.m
	poke := make(chan struct{}, 1)
	notify := func() {
		select {
		case poke <- struct{}{}:
		default:
		}
	}
	stop := m.watch(ctx, notify, true)
	defer stop()

	const minBackoff, maxBackoff = 500 * time.Millisecond, time.Minute
	backoff := minBackoff
	for {
		wake, err := m.Reconcile(ctx)
		wait := m.opts.ResyncInterval
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			m.log.Error(err, "Cannot rotate the webhook certificates; retrying", "in", backoff)
			wait, backoff = backoff, min(2*backoff, maxBackoff)
		} else {
			backoff = minBackoff
			wait = min(wait, max(0, wake.Sub(m.opts.Now())))
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-timer.C:
		case <-poke:
			timer.Stop()
		}
	}
}

// Reconcile brings the Secret and the caBundles to what they should be now
// and returns when they next need a look. The caBundles are written before
// the Secret: trust before use.
func (m *Manager) Reconcile(ctx context.Context) (time.Time, error) {
	secret, err := m.getSecret(ctx)
	if err != nil {
		return time.Time{}, err
	}
	now := m.opts.Now()
	next, why, wake, err := m.policy.plan(parseBundle(secretData(secret)), now)
	if err != nil {
		return time.Time{}, err
	}
	if err := m.injectCABundle(ctx, next.caBundle()); err != nil {
		return time.Time{}, err
	}
	if secret != nil && sameData(secret.Data, next.data()) {
		return wake, nil
	}
	if err := m.putSecret(ctx, secret, next); err != nil {
		return time.Time{}, err
	}
	m.log.Info("Rotated the webhook certificates", "secret", m.secretRef(), "why", why,
		"cas", len(next.cas), "certNotAfter", next.leaf.cert.NotAfter, "nextCheck", wake)
	return wake, nil
}

// Syncer is every replica's part of a Manager.
type Syncer struct{ m *Manager }

var (
	_ manager.Runnable               = (*Syncer)(nil)
	_ manager.LeaderElectionRunnable = (*Syncer)(nil)
)

// NeedLeaderElection implements manager.LeaderElectionRunnable: false.
func (*Syncer) NeedLeaderElection() bool { return false }

// Start writes the Secret's serving certificate into CertDir whenever it
// changes, until ctx is done.
func (s *Syncer) Start(ctx context.Context) error {
	m := s.m
	stop := m.watchSecret(ctx, func(secret *corev1.Secret) {
		b := parseBundle(secret.Data)
		if err := b.usable(m.opts.Now()); err != nil {
			m.log.Info("Secret holds no usable serving certificate; keeping the current one", "secret", m.secretRef(), "reason", err.Error())
			return
		}
		if err := m.writeFiles(b); err != nil {
			m.log.Error(err, "Cannot write the webhook serving certificate", "dir", m.opts.CertDir)
		}
	})
	<-ctx.Done()
	stop()
	return nil
}

func (m *Manager) writeFiles(b bundle) error {
	changed, err := writeFiles(m.opts.CertDir, map[string][]byte{
		m.opts.CertName: b.leaf.certPEM,
		m.opts.KeyName:  b.leaf.keyPEM,
	})
	if err != nil {
		return fmt.Errorf("certs: write the serving certificate into %s: %w", m.opts.CertDir, err)
	}
	if changed {
		m.log.Info("Wrote the webhook serving certificate", "dir", m.opts.CertDir,
			"serial", b.leaf.cert.SerialNumber.Text(16), "notAfter", b.leaf.cert.NotAfter)
	}
	return nil
}

func (m *Manager) secretRef() string { return m.opts.Namespace + "/" + m.opts.SecretName }

func secretData(s *corev1.Secret) map[string][]byte {
	if s == nil {
		return nil
	}
	return s.Data
}

// getSecret returns the Secret, or nil if there is none.
func (m *Manager) getSecret(ctx context.Context) (*corev1.Secret, error) {
	s, err := m.client.CoreV1().Secrets(m.opts.Namespace).Get(ctx, m.opts.SecretName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("certs: read Secret %s: %w", m.secretRef(), err)
	}
	return s, nil
}

// putSecret creates the Secret (cur nil) or updates it at cur's
// resourceVersion, keeping any other keys it has.
func (m *Manager) putSecret(ctx context.Context, cur *corev1.Secret, b bundle) error {
	secrets := m.client.CoreV1().Secrets(m.opts.Namespace)
	if cur == nil {
		_, err := secrets.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Name:      m.opts.SecretName,
				Namespace: m.opts.Namespace,
				Labels: map[string]string{
					resiliencev1alpha1.ManagedByLabel: resiliencev1alpha1.ManagedByValue,
					"app.kubernetes.io/component":     "webhook",
				},
			},
			Type: corev1.SecretTypeTLS,
			Data: b.data(),
		}, metav1.CreateOptions{FieldManager: fieldManager})
		return err
	}
	s := cur.DeepCopy()
	if s.Data == nil {
		s.Data = map[string][]byte{}
	}
	for k, v := range b.data() {
		s.Data[k] = v
	}
	_, err := secrets.Update(ctx, s, metav1.UpdateOptions{FieldManager: fieldManager})
	return err
}

const fieldManager = "fusebox-webhook-certs"

// injectCABundle sets the caBundle of every webhook of the named
// configurations to caBundle. A configuration that does not exist (yet) is
// skipped, and logged once.
func (m *Manager) injectCABundle(ctx context.Context, caBundle []byte) error {
	admreg := m.client.AdmissionregistrationV1()
	for _, name := range m.opts.MutatingWebhookConfigurations {
		cfg, err := admreg.MutatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
		if m.skipMissing("MutatingWebhookConfiguration", name, err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("certs: read MutatingWebhookConfiguration %s: %w", name, err)
		}
		changed := false
		for i := range cfg.Webhooks {
			changed = setCABundle(&cfg.Webhooks[i].ClientConfig.CABundle, caBundle) || changed
		}
		if !changed {
			continue
		}
		if _, err := admreg.MutatingWebhookConfigurations().Update(ctx, cfg, metav1.UpdateOptions{FieldManager: fieldManager}); err != nil {
			return fmt.Errorf("certs: set the caBundle of MutatingWebhookConfiguration %s: %w", name, err)
		}
		m.log.Info("Set the caBundle", "mutatingWebhookConfiguration", name)
	}
	for _, name := range m.opts.ValidatingWebhookConfigurations {
		cfg, err := admreg.ValidatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
		if m.skipMissing("ValidatingWebhookConfiguration", name, err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("certs: read ValidatingWebhookConfiguration %s: %w", name, err)
		}
		changed := false
		for i := range cfg.Webhooks {
			changed = setCABundle(&cfg.Webhooks[i].ClientConfig.CABundle, caBundle) || changed
		}
		if !changed {
			continue
		}
		if _, err := admreg.ValidatingWebhookConfigurations().Update(ctx, cfg, metav1.UpdateOptions{FieldManager: fieldManager}); err != nil {
			return fmt.Errorf("certs: set the caBundle of ValidatingWebhookConfiguration %s: %w", name, err)
		}
		m.log.Info("Set the caBundle", "validatingWebhookConfiguration", name)
	}
	return nil
}

func setCABundle(have *[]byte, want []byte) bool {
	if bytes.Equal(*have, want) {
		return false
	}
	*have = bytes.Clone(want)
	return true
}

// skipMissing says whether err is the configuration's absence, logging the
// first time it is missing (and the first time it is back).
func (m *Manager) skipMissing(kind, name string, err error) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := kind + "/" + name
	if apierrors.IsNotFound(err) {
		if !m.missing[key] {
			m.missing[key] = true
			m.log.Info("Webhook configuration not found; its caBundle will be set once it exists", "kind", kind, "name", name)
		}
		return true
	}
	if err == nil && m.missing[key] {
		delete(m.missing, key)
	}
	return false
}

// watchSecret calls onChange with the Secret on every change (and at first
// sight) until ctx is done or stop is called; stop waits for the watch's
// goroutines. It watches that one object (a metadata.name field selector), so
// RBAC can grant it by resourceNames.
func (m *Manager) watchSecret(ctx context.Context, onChange func(*corev1.Secret)) (stop func()) {
	f := informers.NewSharedInformerFactoryWithOptions(m.client, 0,
		informers.WithNamespace(m.opts.Namespace),
		informers.WithTweakListOptions(byName(m.opts.SecretName)))
	handle := func(obj any) {
		if s, ok := obj.(*corev1.Secret); ok {
			onChange(s)
		}
	}
	_, _ = f.Core().V1().Secrets().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    handle,
		UpdateFunc: func(_, obj any) { handle(obj) },
	})
	return start(ctx, f)
}

// watch calls notify whenever the Secret or, with configurations, one of the
// webhook configurations changes or goes away.
func (m *Manager) watch(ctx context.Context, notify func(), configurations bool) (stop func()) {
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { notify() },
		UpdateFunc: func(any, any) { notify() },
		DeleteFunc: func(any) { notify() },
	}
	var stops []func()
	f := informers.NewSharedInformerFactoryWithOptions(m.client, 0,
		informers.WithNamespace(m.opts.Namespace),
		informers.WithTweakListOptions(byName(m.opts.SecretName)))
	_, _ = f.Core().V1().Secrets().Informer().AddEventHandler(handler)
	stops = append(stops, start(ctx, f))
	if configurations {
		for _, name := range m.opts.MutatingWebhookConfigurations {
			f := informers.NewSharedInformerFactoryWithOptions(m.client, 0, informers.WithTweakListOptions(byName(name)))
			_, _ = f.Admissionregistration().V1().MutatingWebhookConfigurations().Informer().AddEventHandler(handler)
			stops = append(stops, start(ctx, f))
		}
		for _, name := range m.opts.ValidatingWebhookConfigurations {
			f := informers.NewSharedInformerFactoryWithOptions(m.client, 0, informers.WithTweakListOptions(byName(name)))
			_, _ = f.Admissionregistration().V1().ValidatingWebhookConfigurations().Informer().AddEventHandler(handler)
			stops = append(stops, start(ctx, f))
		}
	}
	return func() {
		for _, s := range stops {
			s()
		}
	}
}

func byName(name string) func(*metav1.ListOptions) {
	return func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
	}
}

// start starts f's informers under a context of their own and returns the
// function that stops them and waits for their goroutines.
func start(ctx context.Context, f informers.SharedInformerFactory) func() {
	ctx, cancel := context.WithCancel(ctx)
	f.StartWithContext(ctx)
	return func() {
		cancel()
		f.Shutdown()
	}
}
