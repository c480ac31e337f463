// Package nodeagent is the node agent of docs/design.md §9, run as `fuseboxd node`: one
// per node, it carries the breaker reports and the published config of every pod of its
// node, so that report writes and ConfigMap watches on the API server grow with nodes,
// not pods.
//
// Pods reach it over HTTP through Service fusebox-node, whose internalTrafficPolicy Local
// keeps every request on the pod's own node, and present their projected service-account
// token (audience breakerconfig.NodeAgentAudience) on every request. The agent believes a
// token only once the API server has vouched for it (a TokenReview, whose answer is kept
// until the token expires), only when it names this node, and only for a pod bound to this
// node in the agent's own pod cache (with a GET around the cache for a pod its watch has
// not delivered yet); anything else is refused with 401 or 403 and changes nothing.
//
// Up: a pod PUTs the whole of its report (breakerconfig.AgentReport). The agent checks it
// against the schema's bounds, keeps the latest per pod, and writes one NodeBreakerReport
// per namespace, named after the node and owned by the Node, by update (writer.go): at most
// one write per object per 250 ms; an earned change after a quiet spell (breakerconfig.Earned,
// a new config generation or refusal) 200 ms after it came, so that a node's trips go
// together; what only echoes what the pods were told, and earned changes that follow a
// write within half a second, 500 ms after the first of them, so that an incident costs
// the object two writes; and nothing when the object already says it (pacing.go). A pod that leaves the node loses its line. The object carries what the
// pods add up to (internal/counting); their own reports stay here, served by GET /v1/pods
// to the readers of the agent's namespace (podsapi.go).
//
// Down: a pod GETs its namespace's rendered config, once or as a stream of
// breakerconfig.ConfigSnapshot lines. The agent holds one field-selected watch on the
// namespace's fusebox-breakers ConfigMap for all of the node's pods in that namespace, and
// stops it when the last of their streams ends.
//
// A restarted agent reads back the reports it wrote and holds them until the pods wired
// to it have sent their reports again (they see its new identity, ConfigSnapshot.Agent,
// AgentAck.Agent), or 10 s; only what changed meanwhile is written.
package nodeagent
