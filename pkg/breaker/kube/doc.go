// Package kube connects the breakers of an application pod to the Fusebox operator: it
// hot-reloads their policies from the namespace's fusebox-breakers ConfigMap, adopts the
// fleet's verdicts published there, and reports each breaker's state on its CircuitBreaker.
//
// [Start] returns a [registry.Registry] whose breakers start on the default policy and take
// their published policy as soon as it can be read, keeping their state across every
// update: an open circuit stays open, the window keeps its tallies. The ConfigMap is read
// through the API (a watch on that one object), from a directory where it is mounted as a
// volume, or from the node's agent (fuseboxd node), which streams it to every pod of its
// node over one watch per namespace. A published entry that does not parse
// or validate is refused for that breaker alone, which keeps its last good policy and
// reports the refusal.
//
// Each pod writes one BreakerReport, named after the pod and owned by its Pod, by
// server-side apply, and only when an entry changes. It holds one entry per published
// breaker the application uses: its state, since when and why (the reason tells a state the
// pod earned from one it adopted or was forced into), the failure rate and calls behind the
// last transition, the config generation it runs and why it refused a newer one. The
// operator alone reads the reports and writes the CircuitBreakers' status. Nothing is
// written on a timer, and nothing on the call path waits for the network: a transition is
// recorded in memory and written by a background goroutine, which coalesces what happened
// meanwhile into one write and retries with capped backoff, never dropping the report.
//
// A [registry.Group] (Registry.Group) is one CircuitBreaker too: its name's published policy
// reaches every key's breaker, and the report carries one entry for the whole Group with
// its key summary (how many keys, how many open and half-open, the worst few by name), not
// one entry per key. The entry is Open while any key is open, HalfOpen while any key probes
// and none is open, else Closed, with the reason of the key transition that made it so. A
// fleet verdict (scope Fleet) is not applied to a Group's keys, which each pod judges on
// its own traffic.
//
// Everything runs in the background until the context given to Start is cancelled;
// [Connect] does the same and returns an [Agent] whose Done channel is closed once all
// of it has stopped. Start and StartAgent return at once, their breakers on the default
// policy until the config is read ([Connection.WaitLoaded] waits for it); [FromEnvironment]
// returns once the config is applied, or after [FirstConfigWait] with a warning in the
// log, so that a program's first calls run the published policies when the cluster can
// tell it them in time.
//
// The pod needs read access to the ConfigMap and write access to breakerreports (the
// fusebox-breaker-client ClusterRole), and its name, namespace and UID from the downward
// API ([FromEnvironment] reads POD_NAME, POD_NAMESPACE and POD_UID; the role gives no
// access to Pods, so the UID its report is owned by comes from POD_UID). The API server
// lets a pod write no report but its own (a ValidatingAdmissionPolicy shipped in
// config/policy).
//
// With a node agent (Options.NodeAgent, FUSEBOX_NODE_AGENT) the pod needs none of that:
// it streams its config from the agent and sends its report there (the whole of it, by
// the same rules of what and when), presenting its projected service-account token for
// the agent, which the kubelet rotates and the pod reads again for every request. The
// agent writes one NodeBreakerReport per node per namespace. While the agent cannot be
// reached the breakers keep deciding alone and the pod retries with jittered backoff; it
// never writes a BreakerReport of its own instead. When the agent that answers is a new
// one (it restarted), the pod sends it the whole report again.
package kube
