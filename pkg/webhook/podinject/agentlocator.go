package podinject

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// DefaultAgentService is the node agent's Service, as config/nodeagent and the chart
// name it (in the operator's namespace).
const DefaultAgentService = "fusebox-node"

// DefaultAgentLookupTTL is how long an AgentLocator trusts what it read.
//
// A ClusterIP is fixed for the Service's life, so a read stays true until someone
// deletes and re-creates the Service; a failed read mostly means the agent is not
// installed. Ten seconds bounds the lookups to one per ten seconds per manager replica
// whatever the rate of pod creation (a scale-out of thousands of pods costs one GET),
// and a Service created or re-created is picked up within ten seconds.
const DefaultAgentLookupTTL = 10 * time.Second

// agentLookupTimeout bounds one read, well inside the webhook's 5 s timeout, so that a
// slow API server costs an admission a fallback, not a failure.
const agentLookupTimeout = 2 * time.Second

// AgentLocator finds the URL pods reach their node's agent at (FUSEBOX_NODE_AGENT):
// http://CLUSTER-IP:PORT of the agent's Service, read from the API server, since many
// clusters run no cluster DNS (the hack cluster among them) and the environment is
// fixed when the pod is created. When the Service cannot be read, or has no cluster IP,
// it falls back to the Service's DNS name and says why, for the admission's warnings.
// The Service's internalTrafficPolicy Local keeps every request on the pod's own node
// either way.
//
// Use it by pointer; it is safe for concurrent use, and one read at a time reaches the
// API server: admissions that find no fresh result wait for the read in flight rather
// than start their own.
type AgentLocator struct {
	// Reader reads the Service; an uncached reader (the manager's API reader), since
	// one Service is not worth a watch of every Service of the namespace.
	Reader client.Reader
	// Service is the agent's Service.
	Service types.NamespacedName
	// TTL is how long a result is trusted; zero means DefaultAgentLookupTTL.
	TTL time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	mu      sync.Mutex
	url     string    // guarded by mu
	warning string    // guarded by mu
	until   time.Time // guarded by mu
}

// DNSURL is the agent's URL by the Service's DNS name, which resolves only in a cluster
// that runs DNS for Services.
func (l *AgentLocator) DNSURL() string {
	return agentURL(fmt.Sprintf("%s.%s.svc", l.Service.Name, l.Service.Namespace))
}

// URL returns the agent's URL and, when it had to fall back to the DNS name, a warning
// that says why. A nil locator names the default Service in fusebox-system by DNS,
// without a warning.
func (l *AgentLocator) URL(ctx context.Context) (url, warning string) {
	if l == nil {
		return agentURL(DefaultAgentService + ".fusebox-system.svc"), ""
	}
	now := time.Now
	if l.Now != nil {
		now = l.Now
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if now().Before(l.until) {
		return l.url, l.warning
	}
	url, warning = l.lookup(ctx)
	if ctx.Err() != nil {
		// This admission gave up (or its client did): what it saw says nothing about
		// the Service, so the next admission reads again.
		return url, warning
	}
	ttl := l.TTL
	if ttl <= 0 {
		ttl = DefaultAgentLookupTTL
	}
	l.url, l.warning, l.until = url, warning, now().Add(ttl)
	return url, warning
}

func (l *AgentLocator) lookup(ctx context.Context) (url, warning string) {
	ctx, cancel := context.WithTimeout(ctx, agentLookupTimeout)
	defer cancel()
	var svc corev1.Service
	err := l.Reader.Get(ctx, l.Service, &svc)
	fallback := func(why string) (string, string) {
		return l.DNSURL(), fmt.Sprintf("fusebox: %s, so %s names the node agent by its DNS name, %s, which only a cluster with DNS for Services resolves",
			why, breakerconfig.EnvNodeAgent, l.DNSURL())
	}
	switch {
	case apierrors.IsNotFound(err):
		return fallback(fmt.Sprintf("there is no Service %s (is the node agent installed? the chart's nodeAgent.enabled)", l.Service))
	case err != nil:
		return fallback(fmt.Sprintf("cannot read Service %s (%v)", l.Service, err))
	case svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone:
		return fallback(fmt.Sprintf("Service %s has no cluster IP", l.Service))
	}
	return agentURL(svc.Spec.ClusterIP), ""
}

// agentURL is the agent's URL on host: the Service's port is the agent's, by contract.
func agentURL(host string) string {
	return "http://" + net.JoinHostPort(host, strconv.Itoa(breakerconfig.NodeAgentPort))
}
