package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/fusebox-dev/fusebox/pkg/webhook/certs"
	"github.com/fusebox-dev/fusebox/pkg/webhook/circuitbreaker"
	"github.com/fusebox-dev/fusebox/pkg/webhook/podinject"
)

// CertMode says where the webhook server's certificate comes from.
type CertMode string

const (
	// CertModeOff serves no webhooks.
	CertModeOff CertMode = "off"
	// CertModeExternal serves with the certificate found in CertDir, put there
	// by someone else: cert-manager (a Secret volume), or envtest.
	CertModeExternal CertMode = "external"
	// CertModeSelfSigned serves with a certificate the operator issues and
	// rotates itself (package certs), and sets the caBundle of its webhook
	// configurations.
	CertModeSelfSigned CertMode = "self-signed"
)

// Defaults of Options, matching config/default.
const (
	DefaultPort                           = 9443
	DefaultServiceName                    = "fusebox-webhook-service"
	DefaultSecretName                     = "fusebox-webhook-server-cert"
	DefaultMutatingWebhookConfiguration   = "fusebox-mutating-webhook-configuration"
	DefaultValidatingWebhookConfiguration = "fusebox-validating-webhook-configuration"
	DefaultNamespace                      = "fusebox-system"
)

// Options configure the webhooks. DefaultOptions returns the defaults;
// BindFlags binds each field to a flag.
type Options struct {
	// CertMode is off (no webhooks), external or self-signed.
	CertMode CertMode
	// Host and Port are where the webhook server listens; CertDir holds its
	// tls.crt and tls.key.
	Host    string
	Port    int
	CertDir string
	// EnableHTTP2 lets the webhook server negotiate HTTP/2. Off by default, as the
	// Kubernetes operator scaffolds have it since the HTTP/2 rapid-reset attacks
	// (CVE-2023-44487, CVE-2023-39325): the API server calls webhooks over HTTP/1.1
	// just as well, and a server that never speaks HTTP/2 cannot be hit through it.
	EnableHTTP2 bool

	// Namespace is the operator's: where the node agent's Service is and, in
	// self-signed mode, the certificate Secret and the webhook Service.
	Namespace string

	// For CertModeSelfSigned:

	// ServiceName is the webhook Service; the certificate names it.
	ServiceName string
	// SecretName is the Secret that holds the certificates.
	SecretName string
	// ExtraSANs are more names (or IP addresses) for the certificate, for a
	// server reached other than through the Service.
	ExtraSANs []string
	// MutatingWebhookConfiguration and ValidatingWebhookConfiguration are the
	// configurations whose caBundle is set.
	MutatingWebhookConfiguration, ValidatingWebhookConfiguration string
	// CAValidity and CertValidity: see certs.Options. PropagationDelay and
	// ResyncInterval are certs.Options' too, for tests; zero means the default.
	CAValidity, CertValidity, PropagationDelay, ResyncInterval time.Duration
	// BootstrapTimeout bounds Setup's wait for the certificate Secret.
	BootstrapTimeout time.Duration

	// For the pod webhook:

	// SidecarImage is the fuseboxd image the pod webhook injects into pods annotated
	// fusebox.dev/sidecar: "true".
	SidecarImage string
	// NodeAgentService is the node agent's Service in Namespace, whose cluster IP the
	// pod webhook gives the pods it wires to their node's agent.
	NodeAgentService string
	// NodeAgentLookupTTL is how long the pod webhook trusts a read of that Service;
	// zero means podinject.DefaultAgentLookupTTL. For tests.
	NodeAgentLookupTTL time.Duration
}

// DefaultOptions returns the defaults: webhooks off, and otherwise what
// config/default deploys. The namespace is POD_NAMESPACE, else the service
// account's namespace, else fusebox-system.
func DefaultOptions() Options {
	return Options{
		CertMode:                       CertModeOff,
		Port:                           DefaultPort,
		CertDir:                        filepath.Join(os.TempDir(), "k8s-webhook-server", "serving-certs"),
		Namespace:                      podNamespace(),
		ServiceName:                    DefaultServiceName,
		SecretName:                     DefaultSecretName,
		MutatingWebhookConfiguration:   DefaultMutatingWebhookConfiguration,
		ValidatingWebhookConfiguration: DefaultValidatingWebhookConfiguration,
		CAValidity:                     certs.DefaultCAValidity,
		CertValidity:                   certs.DefaultCertValidity,
		BootstrapTimeout:               time.Minute,
		SidecarImage:                   podinject.DefaultSidecarImage,
		NodeAgentService:               podinject.DefaultAgentService,
	}
}

func podNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	if b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil {
		if ns := strings.TrimSpace(string(b)); ns != "" {
			return ns
		}
	}
	return DefaultNamespace
}

// BindFlags binds o's fields to flags of fs, with o's values as defaults.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	fs.Func("webhook-cert-mode", `Admission webhooks: "off", "external" (serve the certificate in --webhook-cert-dir, e.g. cert-manager's) or "self-signed" (issue, rotate and trust a certificate of our own). (default "`+string(o.CertMode)+`")`, func(s string) error {
		switch m := CertMode(s); m {
		case CertModeOff, CertModeExternal, CertModeSelfSigned:
			o.CertMode = m
			return nil
		}
		return fmt.Errorf("want off, external or self-signed")
	})
	fs.StringVar(&o.Host, "webhook-host", o.Host, "Address the webhook server binds to; empty for every interface.")
	fs.IntVar(&o.Port, "webhook-port", o.Port, "Port the webhook server listens on.")
	fs.StringVar(&o.CertDir, "webhook-cert-dir", o.CertDir, "Directory of the webhook server's tls.crt and tls.key.")
	fs.BoolVar(&o.EnableHTTP2, "enable-http2", o.EnableHTTP2, "Let the webhook server negotiate HTTP/2 (off: HTTP/1.1 only, against HTTP/2's stream-handling denial-of-service bugs).")
	fs.StringVar(&o.Namespace, "webhook-namespace", o.Namespace, "The operator's namespace: the node agent's Service, and (self-signed) the webhook Service and certificate Secret (default: the pod's).")
	fs.StringVar(&o.ServiceName, "webhook-service-name", o.ServiceName, "Webhook Service the certificate names (self-signed).")
	fs.StringVar(&o.SecretName, "webhook-secret-name", o.SecretName, "Secret that holds the webhook certificates (self-signed).")
	fs.Func("webhook-extra-sans", "Comma-separated extra DNS names or IP addresses for the webhook certificate (self-signed).", func(s string) error {
		o.ExtraSANs = nil
		for _, n := range strings.Split(s, ",") {
			if n = strings.TrimSpace(n); n != "" {
				o.ExtraSANs = append(o.ExtraSANs, n)
			}
		}
		return nil
	})
	fs.StringVar(&o.MutatingWebhookConfiguration, "mutating-webhook-configuration", o.MutatingWebhookConfiguration, "MutatingWebhookConfiguration whose caBundle is set (self-signed).")
	fs.StringVar(&o.ValidatingWebhookConfiguration, "validating-webhook-configuration", o.ValidatingWebhookConfiguration, "ValidatingWebhookConfiguration whose caBundle is set (self-signed).")
	fs.DurationVar(&o.CAValidity, "webhook-ca-validity", o.CAValidity, "Validity of the webhook CA, renewed at two thirds (self-signed).")
	fs.StringVar(&o.SidecarImage, "fuseboxd-image", o.SidecarImage, "Image of the fuseboxd sidecar the pod webhook injects into pods annotated fusebox.dev/sidecar: \"true\" (docs/fuseboxd.md).")
	fs.StringVar(&o.NodeAgentService, "node-agent-service", o.NodeAgentService, "The node agent's Service in --webhook-namespace, whose cluster IP the pod webhook gives the pods it wires to their node's agent (docs/webhooks.md).")
	fs.DurationVar(&o.CertValidity, "webhook-cert-validity", o.CertValidity, "Validity of the webhook serving certificate, renewed at two thirds (self-signed).")
}

// NewServer returns the webhook server for ctrl.Options.WebhookServer. It only
// starts if Setup registers webhooks on it.
func (o Options) NewServer() ctrlwebhook.Server {
	return ctrlwebhook.NewServer(ctrlwebhook.Options{Host: o.Host, Port: o.Port, CertDir: o.CertDir, TLSOpts: o.tlsOptions()})
}

// tlsOptions is the webhook server's transport: TLS 1.2 at least (what every supported
// API server speaks), and HTTP/1.1 only unless EnableHTTP2.
func (o Options) tlsOptions() []func(*tls.Config) {
	return []func(*tls.Config){func(c *tls.Config) {
		c.MinVersion = tls.VersionTLS12
		if !o.EnableHTTP2 {
			c.NextProtos = []string{"http/1.1"}
		}
	}}
}

// Setup registers Fusebox's webhooks on mgr's webhook server and, in
// self-signed mode, issues the certificate (before returning: the server
// needs it to start) and adds the certificate runnables to mgr. It adds a
// "webhook" readiness check, so a replica takes traffic only once it serves.
// With CertModeOff it does nothing.
func Setup(mgr ctrl.Manager, o Options) error {
	switch o.CertMode {
	case CertModeOff, "":
		return nil
	case CertModeExternal:
	case CertModeSelfSigned:
		if err := setupSelfSigned(mgr, o); err != nil {
			return err
		}
	default:
		return fmt.Errorf("webhook: unknown certificate mode %q", o.CertMode)
	}
	if err := circuitbreaker.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("webhook: CircuitBreaker: %w", err)
	}
	agent := &podinject.AgentLocator{
		Reader:  mgr.GetAPIReader(),
		Service: types.NamespacedName{Namespace: o.Namespace, Name: o.NodeAgentService},
		TTL:     o.NodeAgentLookupTTL,
	}
	if err := podinject.SetupWithManager(mgr, podinject.Injector{SidecarImage: o.SidecarImage, Agent: agent}); err != nil {
		return fmt.Errorf("webhook: pod injection: %w", err)
	}
	if err := mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
		return fmt.Errorf("webhook: readiness check: %w", err)
	}
	return nil
}

func setupSelfSigned(mgr ctrl.Manager, o Options) error {
	if o.Namespace == "" {
		return errors.New("webhook: self-signed certificates need the operator's namespace (--webhook-namespace)")
	}
	cs, err := kubernetes.NewForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	cm, err := certs.New(cs, certs.Options{
		Namespace:                       o.Namespace,
		SecretName:                      o.SecretName,
		DNSNames:                        append(certs.ServiceDNSNames(o.ServiceName, o.Namespace), o.ExtraSANs...),
		CertDir:                         o.CertDir,
		MutatingWebhookConfigurations:   nonEmpty(o.MutatingWebhookConfiguration),
		ValidatingWebhookConfigurations: nonEmpty(o.ValidatingWebhookConfiguration),
		CAValidity:                      o.CAValidity,
		CertValidity:                    o.CertValidity,
		PropagationDelay:                o.PropagationDelay,
		ResyncInterval:                  o.ResyncInterval,
		Logger:                          mgr.GetLogger().WithName("webhook-certs"),
	})
	if err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	timeout := o.BootstrapTimeout
	if timeout <= 0 {
		timeout = time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := cm.Bootstrap(ctx); err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	if err := mgr.Add(cm.Syncer()); err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	if err := mgr.Add(cm.Rotator()); err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	return nil
}

func nonEmpty(name string) []string {
	if name == "" {
		return nil
	}
	return []string{name}
}
