package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/registry"
)

// Options configure [Start].
type Options struct {
	// NodeAgent, when set, is the base URL of the node's agent (FUSEBOX_NODE_AGENT,
	// "http://HOST:PORT", docs/design.md §9): the config is streamed from it and the
	// report sent to it, and Config, ConfigDir, Pod and PodUID are not used. The pod then
	// needs no API access at all, only its projected token for the agent.
	NodeAgent string
	// NodeAgentToken is the file of the pod's projected service-account token for the
	// agent (audience fusebox.dev/node-agent), read again for every request as the
	// kubelet rotates it; empty means breakerconfig.NodeAgentTokenPath.
	NodeAgentToken string
	// Config reaches the API server. With ConfigDir and NodeAgent empty it is required:
	// the config is read from the ConfigMap through the API. With ConfigDir set it is
	// optional and used only to report; nil turns reporting off.
	Config *rest.Config
	// Namespace is the pod's namespace: where the ConfigMap and its BreakerReport are.
	// Required with Config (and not used with NodeAgent: the agent knows the pod from its
	// token).
	Namespace string
	// Pod is the pod's name: the name of its BreakerReport. Required with Config.
	Pod string
	// PodUID is the pod's UID (downward API metadata.uid, POD_UID), which its report is
	// owned by: the API server refuses a report owned by another UID than the pod's
	// token carries. Set it: [OptionsFromEnvironment] requires POD_UID to report, and
	// the fusebox-breaker-client role has no access to Pods. When it is empty the agent
	// tries to read its Pod once to learn it, which needs get on pods; without that, the
	// report is refused and the agent's log and Stats say to set POD_UID.
	PodUID string
	// ConfigDir, when set, is where the fusebox-breakers ConfigMap is mounted as a volume;
	// the config is read from there instead of through the API, for pods that may not read
	// it.
	ConfigDir string
	// PollInterval is how often the file source re-reads ConfigDir besides reacting to file
	// events; zero means DefaultPollInterval.
	PollInterval time.Duration
	// DefaultPolicy is the policy of breakers the ConfigMap does not name, and of every
	// breaker until it is read; the zero Policy means breaker.DefaultPolicy().
	DefaultPolicy breaker.Policy
	// BreakerOptions are given to every breaker the registry creates (a clock, a
	// classifier, observers such as otelbreaker's).
	BreakerOptions []breaker.Option
	// Logger receives what the connection to the cluster has to say; nil means
	// slog.Default().
	Logger *slog.Logger

	// whyNoReport, set by OptionsFromEnvironment, says why reporting is off.
	whyNoReport string
}

// Connection is a pod's running connection between a breaker registry and the cluster:
// it hot-reloads the breakers' policies and reports their states. Its goroutines stop when
// the context given to [Connect] is cancelled; Done tells when they have. (The node agent,
// fuseboxd node, is another program: one per node, which a connection may go through.)
type Connection struct {
	reg     *registry.Registry
	applier *applier
	rep     *reporter // nil: reporting is off
	done    chan struct{}
}

// Registry returns the registry whose breakers the connection configures and reports.
func (c *Connection) Registry() *registry.Registry { return c.reg }

// Done is closed once every goroutine of the connection has returned, after its context is
// cancelled.
func (c *Connection) Done() <-chan struct{} { return c.done }

// Stats counts what a connection has done since it started.
type Stats struct {
	// ConfigApplies is how many times a published config (or its absence) was applied.
	ConfigApplies int64
	// Adoptions is how many fleet verdicts this pod adopted.
	Adoptions int64
	// Writes is how many times the API server accepted this pod's BreakerReport (or,
	// with a node agent, the agent accepted its report).
	Writes int64
	// WriteFailures is how many writes of the report failed; every one is retried.
	WriteFailures int64
	// Rejected is how many of those failures were the receiver refusing the report (the
	// API server's schema, the admission policy, RBAC, no BreakerReport resource; the
	// agent's 4xx) rather than being unreachable. A refused report is retried with
	// backoff, never dropped.
	Rejected int64
	// LastWriteError is why the latest write failed, or "" once a write succeeds.
	LastWriteError string
}

// ReportWritten reports whether the receiver (the API server, or the node agent) holds
// this pod's latest report: no change is waiting to be written. It is true when reporting is off. A program that is about to
// exit can wait for it so that its last verdicts are not lost.
func (c *Connection) ReportWritten() bool {
	if c.rep == nil {
		return true
	}
	_, _, dirty := c.rep.pending()
	return !dirty
}

// Published returns the last good config published for the breaker named name, and
// whether there is one; false means the breaker runs the default policy. A program that
// serves breaker states to others (cmd/fuseboxd) reads the generation and scope here.
func (c *Connection) Published(name string) (breakerconfig.Config, bool) {
	c.applier.mu.Lock()
	defer c.applier.mu.Unlock()
	b := c.applier.breakers[name]
	if b == nil || b.good == nil {
		return breakerconfig.Config{}, false
	}
	return *b.good, true
}

// Loaded reports whether a first config (or the knowledge that there is none) has been
// applied, after which the breakers run their published policies.
func (c *Connection) Loaded() bool {
	c.applier.mu.Lock()
	defer c.applier.mu.Unlock()
	return c.applier.synced
}

// Stats returns the connection's counters.
func (c *Connection) Stats() Stats {
	s := Stats{ConfigApplies: c.applier.applies.Load(), Adoptions: c.applier.adoptions.Load()}
	if c.rep != nil {
		s.Writes, s.WriteFailures, s.Rejected = c.rep.writes.Load(), c.rep.failures.Load(), c.rep.rejected.Load()
		s.LastWriteError = c.rep.lastError()
	}
	return s
}

// Agent is the former name of [Connection], kept for one release: "agent" is now the node
// agent's word alone (fuseboxd node). New code uses Connection. (It carries no Deprecated
// notice yet: the node agent's and the fleet harness's tests still use it, and the linter
// would refuse them; the notice comes when they have moved.)
type Agent = Connection

// StartAgent is the former name of [Connect], kept for one release as [Agent] is.
func StartAgent(ctx context.Context, o Options) (*Connection, error) { return Connect(ctx, o) }

// Start connects a new breaker registry to the cluster and returns it: see [Connect].
// Use Connect to be able to wait for its goroutines to stop, or to read its counters.
func Start(ctx context.Context, o Options) (*registry.Registry, error) {
	a, err := Connect(ctx, o)
	if err != nil {
		return nil, err
	}
	return a.Registry(), nil
}

// Connect creates a registry whose breakers start on the default policy, starts the
// config source (the node agent's stream, the ConfigMap through the API, or the mounted
// directory) and, with a NodeAgent or a Config, the reporter, and returns at once, even if
// neither can be reached: the breakers run on their defaults until the config arrives,
// and keep deciding alone (the fleet's verdicts are not shared meanwhile) while it cannot
// be read. With a NodeAgent nothing ever falls back to the API server. Everything stops when ctx is
// cancelled; [Connection.Done] is closed when it has.
//
// Only breakers that the ConfigMap names and that the application has created (with
// Registry.Get) are reported: there is no CircuitBreaker for the others, and a pod does
// not speak for breakers it does not use. The first report of a breaker is written after
// the first config is applied, so that a pod starting while its fleet's verdict is Open
// reports Open rather than a fresh Closed. A breaker created after the config arrived
// adopts the fleet verdict and is reported as soon as the registry announces it
// ([registry.Registry.OnCreate]), moments after the Get that created it.
func Connect(ctx context.Context, o Options) (*Connection, error) {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("component", "fusebox")
	switch {
	case o.NodeAgent != "":
		return startWithNodeAgent(ctx, o, log)
	case o.Config == nil && o.ConfigDir == "":
		return nil, errors.New("kube: Options.NodeAgent, Options.Config and Options.ConfigDir are all empty: there is nowhere to read the breaker config from")
	case o.Config != nil && o.Namespace == "":
		return nil, errors.New("kube: Options.Namespace is empty (set it from the downward API: POD_NAMESPACE)")
	case o.Config != nil && o.Pod == "":
		return nil, errors.New("kube: Options.Pod is empty (set it from the downward API: POD_NAME)")
	}
	var (
		hc  *http.Client
		cs  kubernetes.Interface
		rep *reporter
	)
	if o.Config != nil {
		var (
			dc  dynamic.Interface
			err error
		)
		if hc, cs, dc, err = clientsFor(o.Config, o.Pod); err != nil {
			return nil, err
		}
		rep = newReporter(newAPISink(dc, cs, o.Namespace, o.Pod, types.UID(o.PodUID)), log)
	}
	a, err := newConnection(o, rep, log)
	if err != nil {
		return nil, err
	}
	ap := a.applier

	var wg sync.WaitGroup
	if o.ConfigDir != "" {
		poll := o.PollInterval
		if poll <= 0 {
			poll = DefaultPollInterval
		}
		src := &fileSource{dir: o.ConfigDir, poll: poll, apply: ap.apply, log: log}
		wg.Go(func() { src.run(ctx) })
		log.Info("Reading breaker config from a mounted directory", "dir", o.ConfigDir)
	} else {
		src := &apiSource{client: cs, namespace: o.Namespace, apply: ap.apply, log: log}
		wg.Go(func() { src.run(ctx) })
		log.Info("Watching the breaker ConfigMap", "namespace", o.Namespace)
	}
	if rep != nil {
		wg.Go(func() { rep.run(ctx) })
		log.Info("Reporting breaker states in this pod's BreakerReport", "namespace", o.Namespace, "pod", o.Pod)
	} else {
		why := o.whyNoReport
		if why == "" {
			// A program that reads a directory and names no API server (fuseboxd
			// --config-dir, a test): say so in its words, not in the field's.
			why = "no API server to write this pod's BreakerReport to: the config is read from the directory alone"
		}
		log.Info("Not reporting breaker states", "why", why, "dir", o.ConfigDir)
	}
	wg.Go(func() { ap.followCreations(ctx) })
	go func() {
		wg.Wait()
		if hc != nil {
			// Idle keep-alive connections each hold goroutines; they are ours to close.
			utilnet.CloseIdleConnectionsFor(hc.Transport)
		}
		close(a.done)
	}()
	return a, nil
}

// newConnection creates the registry, observed by rep when reporting is on, and the applier
// that configures it.
func newConnection(o Options, rep *reporter, log *slog.Logger) (*Connection, error) {
	def := o.DefaultPolicy
	if def == (breaker.Policy{}) {
		def = breaker.DefaultPolicy()
	}
	opts := slices.Clone(o.BreakerOptions)
	if rep != nil {
		opts = append(opts, breaker.WithObserver(rep))
	}
	reg, err := registry.New(def, opts...)
	if err != nil {
		return nil, fmt.Errorf("kube: default policy: %w", err)
	}
	ap := &applier{reg: reg, def: def, rep: rep, log: log, created: make(chan struct{}, 1), loaded: make(chan struct{})}
	if rep != nil {
		rep.taken = ap.reportTaken
	}
	reg.OnCreate(ap.announced)
	return &Connection{reg: reg, applier: ap, rep: rep, done: make(chan struct{})}, nil
}

// startWithNodeAgent runs the pod through its node's agent: the config from the agent's
// stream, the report to the agent, and nothing from the API server. When the agent turns
// out to be a new one (it restarted), the whole report goes to it again.
func startWithNodeAgent(ctx context.Context, o Options, log *slog.Logger) (*Connection, error) {
	client, err := newAgentClient(o.NodeAgent, o.NodeAgentToken)
	if err != nil {
		return nil, err
	}
	rep := newReporter(&agentSink{c: client}, log)
	rep.holdFor = noHold
	client.restarted = rep.resendAll
	a, err := newConnection(o, rep, log)
	if err != nil {
		return nil, err
	}
	if o.ConfigDir != "" {
		log.Info("Not reading the mounted config directory: the node agent streams the config", "dir", o.ConfigDir)
	}
	src := &agentSource{client: client, apply: a.applier.apply, log: log}
	var wg sync.WaitGroup
	wg.Go(func() { src.run(ctx) })
	wg.Go(func() { rep.run(ctx) })
	wg.Go(func() { a.applier.followCreations(ctx) })
	log.Info("Reading breaker config from and reporting breaker states to the node agent", "agent", client.base.Host, "tokenFile", client.tokenFile)
	go func() {
		wg.Wait()
		client.close()
		close(a.done)
	}()
	return a, nil
}

// clientsFor returns the clients of one agent, over one HTTP client that the agent closes
// the idle connections of when it stops.
func clientsFor(c *rest.Config, pod string) (*http.Client, kubernetes.Interface, dynamic.Interface, error) {
	c = rest.CopyConfig(c)
	if c.UserAgent == "" {
		c.UserAgent = "fusebox-pod/" + pod
	}
	hc, err := rest.HTTPClientFor(c)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("kube: %w", err)
	}
	cs, err := kubernetes.NewForConfigAndClient(c, hc)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("kube: %w", err)
	}
	dc, err := dynamic.NewForConfigAndClient(c, hc)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("kube: %w", err)
	}
	return hc, cs, dc, nil
}

// Environment variables that FromEnvironment reads.
const (
	EnvPodName        = breakerconfig.EnvPodName
	EnvPodUID         = breakerconfig.EnvPodUID
	EnvNamespace      = breakerconfig.EnvNamespace
	EnvConfigDir      = breakerconfig.EnvConfigDir
	EnvNodeAgent      = breakerconfig.EnvNodeAgent
	EnvNodeAgentToken = breakerconfig.EnvNodeAgentToken
)

// FromEnvironment connects the pod as [OptionsFromEnvironment] configures it, as
// [Start] does, and returns its registry once the first config is applied, so that the
// first calls run the published policies and not the default one: it waits for that up to
// [FirstConfigWait]. If the config has not arrived by then (the API server or the node
// agent cannot be reached, or answers slowly), it logs a warning that says so and returns
// the registry anyway: its breakers run the default policy until the config arrives, and
// the program starts, since a cluster that cannot tell a pod its policies must not keep
// it from serving. It returns ctx's error if ctx ends first.
func FromEnvironment(ctx context.Context) (*registry.Registry, error) {
	o, err := OptionsFromEnvironment()
	if err != nil {
		return nil, err
	}
	a, err := Connect(ctx, o)
	if err != nil {
		return nil, err
	}
	if err := a.waitFirstConfig(ctx, firstConfigWait); err != nil {
		return nil, err
	}
	return a.Registry(), nil
}

// OptionsFromEnvironment builds Options for a pod: its name, namespace and UID from
// POD_NAME, POD_NAMESPACE and POD_UID (set them with the downward API, fieldRef
// metadata.name, metadata.namespace and metadata.uid, as the injection webhook does),
// and the in-cluster API config. The pod never reads its Pod: the UID comes from
// POD_UID alone.
// With FUSEBOX_CONFIG_DIR set, the config is read from that directory instead (the
// ConfigMap mounted as a volume), and states are reported only if the pod also has an
// in-cluster config and all three variables; otherwise reporting is off, and Start logs
// why.
//
// With FUSEBOX_NODE_AGENT set (the injection webhook sets it for a pod wired to its node's
// agent), the config comes from the agent and the report goes to it, with the token in
// FUSEBOX_NODE_AGENT_TOKEN (default breakerconfig.NodeAgentTokenPath); the pod then needs
// neither the downward-API variables nor an in-cluster config, and nothing is read from
// the API server.
func OptionsFromEnvironment() (Options, error) {
	o := Options{
		Pod:       os.Getenv(EnvPodName),
		PodUID:    os.Getenv(EnvPodUID),
		Namespace: os.Getenv(EnvNamespace),
		ConfigDir: os.Getenv(EnvConfigDir),
	}
	if agent := os.Getenv(EnvNodeAgent); agent != "" {
		o.NodeAgent, o.NodeAgentToken = agent, os.Getenv(EnvNodeAgentToken)
		if _, err := newAgentClient(o.NodeAgent, o.NodeAgentToken); err != nil {
			return Options{}, fmt.Errorf("%w (from %s)", err, EnvNodeAgent)
		}
		return o, nil
	}
	var missing []string
	if o.Pod == "" {
		missing = append(missing, EnvPodName)
	}
	if o.Namespace == "" {
		missing = append(missing, EnvNamespace)
	}
	if o.PodUID == "" {
		missing = append(missing, EnvPodUID)
	}
	cfg, cfgErr := rest.InClusterConfig()
	if o.ConfigDir == "" {
		if len(missing) > 0 {
			return Options{}, fmt.Errorf("kube: %s not set: expose them with the downward API (fieldRef metadata.name, metadata.namespace and metadata.uid; the injection webhook sets all three), or set %s to read a mounted ConfigMap instead", joinNames(missing), EnvConfigDir)
		}
		if cfgErr != nil {
			return Options{}, fmt.Errorf("kube: no in-cluster API config (%w); set %s to read a mounted ConfigMap instead", cfgErr, EnvConfigDir)
		}
		o.Config = cfg
		return o, nil
	}
	switch {
	case len(missing) > 0:
		o.whyNoReport = joinNames(missing) + " not set"
	case cfgErr != nil:
		o.whyNoReport = fmt.Sprintf("no in-cluster API config (%v)", cfgErr)
	default:
		o.Config = cfg
	}
	return o, nil
}

func joinNames(names []string) string {
	if len(names) == 1 {
		return names[0] + " is"
	}
	return fmt.Sprintf("%s and %s are", strings.Join(names[:len(names)-1], ", "), names[len(names)-1])
}
