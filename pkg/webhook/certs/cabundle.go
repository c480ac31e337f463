package certs

import (
	"bytes"
	"context"
	"fmt"
	"sync"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// caBundleInjector sets the caBundle of every webhook of Fusebox's webhook
// configurations, mutating and validating alike, and watches them so that a
// reset caBundle is put back. Safe for concurrent use.
type caBundleInjector struct {
	client  kubernetes.Interface
	configs []webhookConfiguration
	log     logr.Logger

	mu      sync.Mutex
	missing map[string]bool // guarded by mu: configurations last seen missing, by String()
}

// webhookConfiguration is one configuration whose caBundle is set, whatever
// its kind.
type webhookConfiguration struct {
	kind, name string
	resource   schema.GroupVersionResource // to watch it
	// setCABundle sets the caBundle of each of its webhooks, updating the
	// configuration only if that changed one.
	setCABundle func(ctx context.Context, caBundle []byte) (changed bool, err error)
}

func (c webhookConfiguration) String() string { return c.kind + " " + c.name }

func newCABundleInjector(client kubernetes.Interface, mutating, validating []string, log logr.Logger) *caBundleInjector {
	in := &caBundleInjector{client: client, log: log, missing: map[string]bool{}}
	for _, name := range mutating {
		in.configs = append(in.configs, newWebhookConfiguration("MutatingWebhookConfiguration", "mutatingwebhookconfigurations", name,
			client.AdmissionregistrationV1().MutatingWebhookConfigurations(), mutatingClientConfigs))
	}
	for _, name := range validating {
		in.configs = append(in.configs, newWebhookConfiguration("ValidatingWebhookConfiguration", "validatingwebhookconfigurations", name,
			client.AdmissionregistrationV1().ValidatingWebhookConfigurations(), validatingClientConfigs))
	}
	return in
}

// The two kinds differ only in their Go types. These are all that is said
// once per kind: where their webhooks' client configurations are.

func mutatingClientConfigs(c *admissionregistrationv1.MutatingWebhookConfiguration) (ccs []*admissionregistrationv1.WebhookClientConfig) {
	for i := range c.Webhooks {
		ccs = append(ccs, &c.Webhooks[i].ClientConfig)
	}
	return ccs
}

func validatingClientConfigs(c *admissionregistrationv1.ValidatingWebhookConfiguration) (ccs []*admissionregistrationv1.WebhookClientConfig) {
	for i := range c.Webhooks {
		ccs = append(ccs, &c.Webhooks[i].ClientConfig)
	}
	return ccs
}

// configClient is what setting a caBundle needs of client-go's typed client
// for one kind of webhook configuration.
type configClient[Config any] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (Config, error)
	Update(ctx context.Context, cfg Config, opts metav1.UpdateOptions) (Config, error)
}

// newWebhookConfiguration makes the configuration name of kind (resource, in
// the API's words), reached through client, whose webhooks' client
// configurations clientConfigs finds.
func newWebhookConfiguration[Config any](
	kind, resource, name string,
	client configClient[Config],
	clientConfigs func(Config) []*admissionregistrationv1.WebhookClientConfig,
) webhookConfiguration {
	setCABundle := func(ctx context.Context, caBundle []byte) (bool, error) {
		cfg, err := client.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, fmt.Errorf("read: %w", err)
		}
		changed := false
		for _, cc := range clientConfigs(cfg) {
			if !bytes.Equal(cc.CABundle, caBundle) {
				cc.CABundle = bytes.Clone(caBundle)
				changed = true
			}
		}
		if !changed {
			return false, nil
		}
		if _, err := client.Update(ctx, cfg, metav1.UpdateOptions{FieldManager: fieldManager}); err != nil {
			return false, fmt.Errorf("set the caBundle: %w", err)
		}
		return true, nil
	}
	return webhookConfiguration{
		kind:        kind,
		name:        name,
		resource:    admissionregistrationv1.SchemeGroupVersion.WithResource(resource),
		setCABundle: setCABundle,
	}
}

// inject sets the caBundle of every webhook of the configurations to
// caBundle. A configuration that does not exist (yet) is skipped, and logged
// once.
func (in *caBundleInjector) inject(ctx context.Context, caBundle []byte) error {
	for _, c := range in.configs {
		changed, err := c.setCABundle(ctx, caBundle)
		if in.skipMissing(c, err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("certs: %s: %w", c, err)
		}
		if changed {
			in.log.Info("Set the caBundle", "kind", c.kind, "name", c.name)
		}
	}
	return nil
}

// skipMissing says whether err is c's absence, logging the first time it is
// missing (and forgetting that once it is back).
func (in *caBundleInjector) skipMissing(c webhookConfiguration, err error) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	key := c.String()
	if apierrors.IsNotFound(err) {
		if !in.missing[key] {
			in.missing[key] = true
			in.log.Info("Webhook configuration not found; its caBundle will be set once it exists", "kind", c.kind, "name", c.name)
		}
		return true
	}
	if err == nil {
		delete(in.missing, key)
	}
	return false
}

// watch sends handler the changes of every configuration until ctx is done
// or stop is called.
func (in *caBundleInjector) watch(ctx context.Context, handler cache.ResourceEventHandler) (stop func(), err error) {
	var stops []func()
	stop = func() {
		for _, s := range stops {
			s()
		}
	}
	for _, c := range in.configs {
		s, err := watchNamed(ctx, in.client, c.resource, "", c.name, handler)
		if err != nil {
			stop()
			return nil, err
		}
		stops = append(stops, s)
	}
	return stop, nil
}
