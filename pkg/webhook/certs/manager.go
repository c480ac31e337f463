package certs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
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
	opts      Options
	policy    policy
	secrets   secretStore
	caBundles *caBundleInjector
	log       logr.Logger
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
		secrets:   secretStore{client: client, namespace: o.Namespace, name: o.SecretName},
		caBundles: newCABundleInjector(client, o.MutatingWebhookConfigurations, o.ValidatingWebhookConfigurations, o.Logger),
		log:       o.Logger,
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
		secret, err := m.secrets.get(ctx)
		if err != nil {
			return err
		}
		cur := parseBundle(secretData(secret))
		if secret != nil && cur.usable(m.opts.Now()) == nil {
			return m.writeCertDir(cur)
		}
		next, why, _, err := m.policy.plan(cur, m.opts.Now())
		if err != nil {
			return err
		}
		if err := m.secrets.put(ctx, secret, next.data()); apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
			lastErr = err // another replica got there first: read what it wrote
			continue
		} else if err != nil {
			return err
		}
		m.log.Info("Issued the webhook serving certificate", "secret", m.secrets.String(), "why", why, "notAfter", next.leaf.cert.NotAfter)
		return m.writeCertDir(next)
	}
	return fmt.Errorf("certs: bootstrap kept racing other writers of Secret %s: %w", m.secrets, lastErr)
}

// Rotator returns the runnable that renews the certificates and keeps the
// caBundles set. It needs leader election: with several replicas, one rotates.
func (m *Manager) Rotator() *Rotator { return &Rotator{m: m} }

// Syncer returns the runnable that keeps CertDir in step with the Secret. Every
// replica runs one.
func (m *Manager) Syncer() *Syncer { return &Syncer{m: m} }
