// Package kube connects the breakers of an application pod to the Fusebox operator: it
// hot-reloads their policies from the namespace's fusebox-breakers ConfigMap, adopts the
// fleet's verdicts published there, and reports each breaker's state on its CircuitBreaker.
//
// [Start] returns a [breaker.Registry] whose breakers start on the default policy and take
// their published policy as soon as it can be read, keeping their state across every
// update: an open circuit stays open, the window keeps its tallies. The ConfigMap is read
// either through the API (a watch on that one object) or, for pods that may not read it,
// from a directory where it is mounted as a volume. A published entry that does not parse
// or validate is refused for that breaker alone, which keeps its last good policy and
// reports the refusal.
//
// Each pod writes its own entry of status.members on the CircuitBreaker named like the
// breaker, by server-side apply with a field manager of its own, and only when the entry's
// content changes: its state and since when, the failure rate and calls behind the last
// transition, the config generation it runs and why it refused a newer one. Nothing is
// written on a timer, and nothing on the call path waits for the network: a transition is
// recorded in memory and written by a background goroutine, which retries with capped
// backoff while the API server is away.
//
// Everything runs in the background until the context given to Start is cancelled;
// [StartAgent] does the same and returns an [Agent] whose Done channel is closed once all
// of it has stopped.
//
// The pod needs read access to the ConfigMap and patch access to circuitbreakers/status
// (the fusebox-breaker-client ClusterRole), and its name and namespace from the downward
// API ([FromEnvironment] reads them from POD_NAME and POD_NAMESPACE).
package kube
