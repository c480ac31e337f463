package nodeagent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// Options configure an [Agent].
type Options struct {
	// Config reaches the API server as the agent. In its pod that is the in-cluster
	// config of service account fusebox-node, whose projected token carries the node-name
	// and node-uid extras the agent learns its Node's UID from (SelfSubjectReview).
	// Required.
	Config *rest.Config
	// NodeName is the node the agent serves (NODE_NAME, from spec.nodeName). Required.
	NodeName string
	// Logger receives what the agent has to say; nil means slog.Default().
	Logger *slog.Logger
	// ShutdownGrace is how long, once Run's context ends, the agent may take to end its
	// streams and write the changes it still holds. Zero drops every connection and
	// writes nothing more, as a killed process would.
	ShutdownGrace time.Duration

	// clock paces the writes and dates what the agent remembers (kept token answers, pods
	// found missing); nil means the real clock. Tests set it.
	clock clock.WithTicker
	// port overrides the port's limits (listener.go); zero values mean the defaults.
	// Tests set it.
	port portLimits
}

// Agent is one node's agent. Create it with [New] and run it with [Agent.Run]; its
// methods are safe for concurrent use.
type Agent struct {
	node    string
	id      string
	log     *slog.Logger
	grace   time.Duration
	hc      *http.Client
	cs      kubernetes.Interface
	auth    *authenticator
	pods    *podIndex
	book    *book
	configs *configWatches
	port    portLimits
	// readers bounds the GET /v1/pods served at once (breakerconfig.MaxAgentPodsRequests).
	readers chan struct{}

	// namespace is the agent's own, from its identity: the namespace whose
	// breakerconfig.NodeAgentReaders may read GET /v1/pods. Set before ready.
	namespace string
	ready     atomic.Bool
	// refused counts the requests answered 4xx or 503 before anything was recorded, by
	// status; streams the config streams open.
	refused refusals
	streams atomic.Int64
}

// Stats counts what an agent has done since it started.
type Stats struct {
	// Writes is how many NodeBreakerReport writes (applies and deletes) the API server
	// accepted; WriteFailures how many failed (each is retried).
	Writes, WriteFailures int64
	// TokenReviews is how many tokens the agent asked the API server about: one per
	// token, not one per request, while the answer is kept. TokensVerified is how many
	// pods' tokens it checked itself against the issuer's keys instead, and KeyFetches
	// how often it read those keys.
	TokenReviews, TokensVerified, KeyFetches int64
	// LiveLookups is how many pods the agent read from the API server because its pod
	// cache had not seen them yet.
	LiveLookups int64
	// ConfigWatches is how many namespaces' ConfigMaps the agent watches now;
	// ConfigWatchesStarted how many watches it has started in all.
	ConfigWatches, ConfigWatchesStarted int64
	// Refused is how many requests were refused (400, 401, 403, 409, 413, 503), connections
	// turned away at the port's cap included.
	Refused int64
	// ConfigStreams is how many config streams are open now.
	ConfigStreams int64
}

// New returns an agent for o.NodeName, reaching the API server through o.Config. It
// contacts nothing until Run.
func New(o Options) (*Agent, error) {
	switch {
	case o.Config == nil:
		return nil, errors.New("nodeagent: Options.Config is nil: the agent needs to reach the API server")
	case o.NodeName == "":
		return nil, errors.New("nodeagent: Options.NodeName is empty (set NODE_NAME from the downward API: fieldRef spec.nodeName)")
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("component", "fusebox-node", "node", o.NodeName)
	clk := o.clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	c := rest.CopyConfig(o.Config)
	if c.UserAgent == "" {
		c.UserAgent = "fusebox-node/" + o.NodeName
	}
	// Report writes and token reviews of a whole node go through this one client; the
	// client-side rate limiter's default (5 a second) would pace them instead of the
	// pacing of the writes, which is what bounds them.
	c.QPS, c.Burst = 50, 100
	hc, err := rest.HTTPClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("nodeagent: %w", err)
	}
	cs, err := kubernetes.NewForConfigAndClient(c, hc)
	if err != nil {
		return nil, fmt.Errorf("nodeagent: %w", err)
	}
	dc, err := dynamic.NewForConfigAndClient(c, hc)
	if err != nil {
		return nil, fmt.Errorf("nodeagent: %w", err)
	}
	id, err := newAgentID()
	if err != nil {
		return nil, err
	}
	a := &Agent{node: o.NodeName, id: id, log: log, grace: o.ShutdownGrace, hc: hc, cs: cs,
		port: o.port.withDefaults(), readers: make(chan struct{}, breakerconfig.MaxAgentPodsRequests)}
	keys := newIssuerKeys(func(ctx context.Context, path string) ([]byte, error) {
		return cs.CoreV1().RESTClient().Get().AbsPath(path).DoRaw(ctx)
	})
	a.auth = newAuthenticator(cs.AuthenticationV1().TokenReviews(), keys, clk)
	a.book = newBook(o.NodeName, newAPIWriter(dc.Resource(nodeReports), o.NodeName), clk, log)
	a.pods = newPodIndex(cs, o.NodeName, clk, a.book.podGone, a.book.revisionChanged)
	a.book.pods = a.pods
	a.configs = newConfigWatches(cs, id, log)
	return a, nil
}

// newAgentID is a fresh identity for a running agent: pods that see it change send their
// reports again.
func newAgentID() (string, error) {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("nodeagent: agent identity: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// ID is the running agent's identity, as ConfigSnapshot.Agent and AgentAck.Agent carry it.
func (a *Agent) ID() string { return a.id }

// Ready reports whether the agent serves pods: it knows its Node, its pod cache has
// synced and it has read back the reports it wrote before.
func (a *Agent) Ready() bool { return a.ready.Load() }

// Stats returns the agent's counters.
func (a *Agent) Stats() Stats {
	writes, failures := a.book.counts()
	watching, started := a.configs.counts()
	return Stats{
		Writes: writes, WriteFailures: failures,
		TokenReviews: a.auth.reviews.Load(), TokensVerified: a.auth.keys.verified.Load(), KeyFetches: a.auth.keys.fetches.Load(),
		LiveLookups:   a.pods.liveLookups.Load(),
		ConfigWatches: watching, ConfigWatchesStarted: started,
		Refused: a.refused.total(), ConfigStreams: a.streams.Load(),
	}
}

// Written reports whether every change the agent holds is written: nothing is waiting
// for its turn or being written.
func (a *Agent) Written() bool { return a.book.idle() }

// Run serves pods on ln and does the agent's work until ctx ends: it learns its Node's
// UID, starts its pod cache, reads back the node's reports, and from then on answers
// pods and writes their reports. Requests that come before it is ready get 503. Once ctx
// ends it stops serving, ends the config streams and, within Options.ShutdownGrace,
// writes what it still holds; it returns when all of it has stopped. It returns an
// error only when serving on ln fails.
func (a *Agent) Run(ctx context.Context, ln net.Listener) error {
	// The work outlives ctx by the grace period, to write what it holds.
	work, stopWork := context.WithCancel(context.Background())
	defer stopWork()
	// Streams end with ctx, so that a graceful Shutdown is not held up by them.
	streams, endStreams := context.WithCancel(context.Background())
	defer endStreams()
	srv := &http.Server{
		Handler:           a.handler(),
		ReadHeaderTimeout: a.port.readHeader,
		ReadTimeout:       a.port.readBody,
		IdleTimeout:       a.port.idle,
		MaxHeaderBytes:    maxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return streams },
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(a.capped(ln)) }()

	var wg sync.WaitGroup
	wg.Go(func() { a.work(work) })
	a.log.Info("Node agent serving", "address", ln.Addr().String(), "agent", a.id)

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-served:
		a.log.Error("Serving failed; stopping", "error", serveErr)
	}
	a.ready.Store(false)
	if a.grace <= 0 {
		_ = srv.Close()
	} else {
		endStreams()
		graceCtx, cancel := context.WithTimeout(context.Background(), a.grace)
		if err := srv.Shutdown(graceCtx); err != nil {
			_ = srv.Close()
		}
		if err := a.book.flush(graceCtx); err != nil {
			a.log.Warn("Changes still unwritten at shutdown", "error", err)
		}
		cancel()
	}
	stopWork()
	wg.Wait()
	utilnet.CloseIdleConnectionsFor(a.hc.Transport)
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	return nil
}

// work is everything but serving: identity, pod cache, read-back, then the writer and
// the config watches, until ctx ends.
func (a *Agent) work(ctx context.Context) {
	a.configs.start(ctx)
	defer a.configs.stopAll()
	var nodeUID types.UID
	if !a.retry(ctx, "learn this node's UID from the agent's own identity", func(ctx context.Context) (err error) {
		nodeUID, a.namespace, err = a.whoAmI(ctx)
		return err
	}) {
		return
	}
	a.book.setOwner(nodeUID)
	// The issuer's keys, read before the pods' first tokens come: without them each token
	// costs a TokenReview, which is what the agent does until it can read them.
	if err := a.auth.keys.refresh(time.Time{}, a.auth.clock.Now()); err != nil {
		a.log.Warn("Cannot read the service-account issuer's keys; pods' tokens go to TokenReview", "error", err)
	}

	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { a.pods.run(ctx) })
	if !cache.WaitForCacheSync(ctx.Done(), a.pods.synced) {
		return
	}
	if !a.retry(ctx, "read back this node's reports", func(ctx context.Context) error {
		return a.book.readBack(ctx)
	}) {
		return
	}
	a.ready.Store(true)
	a.log.Info("Node agent ready", "nodeUID", nodeUID)
	a.book.run(ctx)
}

// retryBackoff paces the agent's start while the API server cannot be reached.
var retryBackoff = wait.Backoff{Duration: 250 * time.Millisecond, Factor: 2, Jitter: 0.5, Steps: 1 << 20, Cap: 8 * time.Second}

// retry runs f until it succeeds, logging each distinct error once, and reports false if
// ctx ended first.
func (a *Agent) retry(ctx context.Context, what string, f func(context.Context) error) bool {
	b := retryBackoff
	var logged string
	for {
		err := f(ctx)
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		if err.Error() != logged {
			logged = err.Error()
			a.log.Warn("Cannot start serving; retrying", "step", what, "error", err)
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(b.Step()):
		}
	}
}

// The extras of a token bound to a pod on a node, as the API server authenticates it.
const (
	extraPodName  = "authentication.kubernetes.io/pod-name"
	extraPodUID   = "authentication.kubernetes.io/pod-uid"
	extraNodeName = "authentication.kubernetes.io/node-name"
	extraNodeUID  = "authentication.kubernetes.io/node-uid"
)

// whoAmI returns the UID of the agent's Node and the agent's namespace from its own
// identity: the node-uid extra that the API server puts on a token bound to a pod on a
// node, and the service account's user name. The reports are owned by that Node, and the
// agent needs no read access to Nodes to learn it; the readers of GET /v1/pods are
// service accounts of that namespace.
func (a *Agent) whoAmI(ctx context.Context) (types.UID, string, error) {
	r, err := a.cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return "", "", fmt.Errorf("SelfSubjectReview: %w", err)
	}
	u := r.Status.UserInfo
	node, uid := first(u.Extra[extraNodeName]), first(u.Extra[extraNodeUID])
	switch {
	case node == "" || uid == "":
		return "", "", fmt.Errorf("the agent's identity %q carries no %s and %s extras: run it under the projected service-account token of its own pod (the DaemonSet's), on a node whose Node object exists", u.Username, extraNodeName, extraNodeUID)
	case node != a.node:
		return "", "", fmt.Errorf("the agent's identity is of a pod on node %s, but NODE_NAME says %s: set NODE_NAME from fieldRef spec.nodeName", node, a.node)
	}
	rest, _ := strings.CutPrefix(u.Username, serviceAccountPrefix)
	namespace, _, _ := strings.Cut(rest, ":")
	return types.UID(uid), namespace, nil
}

func first(vs authenticationv1.ExtraValue) string {
	if len(vs) == 0 {
		return ""
	}
	return vs[0]
}
