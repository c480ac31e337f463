package breakerconfig

import "time"

// The node agent's API (docs/design.md §9): the wire between an application pod (the Go
// library's connection, pkg/breaker/kube, or the pod's fuseboxd serve) and fuseboxd node,
// the agent of the pod's node, which carries every pod's report and config for its node. This file is its
// one definition; both ends import it.

// The NodeBreakerReport resource: one per node per namespace with reporting pods, named
// after the node and owned by its Node.
const (
	NodeReportKind     = "NodeBreakerReport"
	NodeReportResource = "nodebreakerreports"
)

// The environment of a pod wired to its node's agent, as the pod-injection webhook sets
// it: where the agent is, and the file of the pod's projected service-account token for
// it. With EnvNodeAgent set, the pod reads its config from the agent and sends its
// report there, and needs no access to the API server.
const (
	// EnvNodeAgent is the agent's base URL, "http://HOST:PORT" (the Service fusebox-node,
	// whose internalTrafficPolicy Local keeps every request on the pod's own node).
	EnvNodeAgent = "FUSEBOX_NODE_AGENT"
	// EnvNodeAgentToken is the path of the token file; empty means NodeAgentTokenPath.
	EnvNodeAgentToken = "FUSEBOX_NODE_AGENT_TOKEN"
)

// NodeAgentAudience is the audience of the projected service-account token a pod presents
// to its node's agent: a token for the agent is good for nothing else, and no other token
// is good for the agent.
const NodeAgentAudience = "fusebox.dev/node-agent"

// NodeAgentTokenPath is where the injection webhook mounts that token.
const NodeAgentTokenPath = "/var/run/fusebox/node-agent/token"

// NodeAgentPort is the port the agent serves pods on, and the port of Service
// fusebox-node.
const NodeAgentPort = 8476

// EnvNodeName is the agent's own environment: the node it runs on, from the downward API
// (fieldRef spec.nodeName), as the DaemonSet sets it. The agent accepts only pods bound
// to this node and writes only this node's reports.
const EnvNodeName = "NODE_NAME"

// The agent's paths. Every request carries the pod's token as "Authorization: Bearer
// <token>"; the agent knows the pod, its namespace and its node from it. A request
// without a valid token gets 401, one whose pod is not bound to the agent's node 403,
// and neither records anything.
const (
	// AgentConfigPath serves the pod's namespace's rendered config. GET answers one
	// ConfigSnapshot; GET with ?watch=true streams them, newline-delimited JSON, one
	// line at once and one per change after it.
	AgentConfigPath = "/v1/config"
	// AgentReportPath takes the pod's report: PUT an AgentReport, the whole of it
	// every time (the agent keeps the latest per pod); 200 with an AgentAck. A report
	// that fails the BreakerReport schema gets 400 naming the field, and changes
	// nothing.
	AgentReportPath = "/v1/report"
	// AgentReadyPath answers 200 once the agent knows its node, has its node's pods and
	// has read back the reports it wrote before a restart, and 503 until then; it needs
	// no token (the DaemonSet's readiness probe). AgentHealthPath answers 200 while the
	// agent serves.
	AgentReadyPath  = "/readyz"
	AgentHealthPath = "/healthz"
)

// The rest of the wire the two ends must spell alike, added as they were built: the
// query parameter that turns a config GET into a stream, the stream's media type, the
// bounds of a report and the body of every refusal.
const (
	// AgentWatchParam, set to "true" on GET AgentConfigPath, asks for the stream.
	AgentWatchParam = "watch"
	// AgentStreamType is the Content-Type of the stream: one ConfigSnapshot per line.
	AgentStreamType = "application/x-ndjson"
	// MaxAgentEntries is the most entries an AgentReport may hold, lower than a
	// BreakerReport's MaxReportEntries, so that one pod's report always fits a
	// NodeBreakerReport's entries (api/v1alpha1.MaxNodeReportEntries).
	MaxAgentEntries = 100
	// MaxAgentReportSize bounds the body of PUT AgentReportPath, in bytes: MaxAgentEntries
	// entries each at their largest (a 1,024-character configError, five 253-character key
	// names, every count at its bound) fit with room to spare. A larger body gets 413.
	MaxAgentReportSize = 1 << 20
)

// AgentError is the body of every answer the agent does not accept: 400 (the report
// fails the schema's bounds; Error names the field), 401 (no valid token), 403 (the
// token's pod is not bound to the agent's node), 409 (the node's report has no room for
// the pod), 413 (the body is over MaxAgentReportSize), 503 (the agent is not ready yet,
// or cannot reach the API server to check a token). Nothing is recorded.
type AgentError struct {
	Error string `json:"error"`
}

// ConfigSnapshot is one line of the config stream: the whole of the namespace's
// fusebox-breakers ConfigMap as it stands.
type ConfigSnapshot struct {
	// Agent identifies the running agent; a new value means the agent restarted and
	// holds none of the pod's report: the pod sends it again.
	Agent string `json:"agent"`
	// Exists says whether the namespace has the ConfigMap; false with no Data means
	// nothing is published.
	Exists bool `json:"exists"`
	// Data is the ConfigMap's data: one Key(name) per breaker.
	Data map[string]string `json:"data,omitempty"`
}

// AgentReport is what a pod sends its agent: the entries of its report, as it would
// write them in its own BreakerReport.
type AgentReport struct {
	Breakers []ReportEntry `json:"breakers"`
}

// AgentAck answers an AgentReport the agent accepted.
type AgentAck struct {
	// Agent identifies the running agent, as ConfigSnapshot.Agent does.
	Agent string `json:"agent"`
}

// AgentHeartbeatInterval is how often the agent writes a heartbeat on a config stream
// that has had nothing else to say: a line with nothing but its newline, which a JSON
// reader of the stream skips. A stream whose peer is gone is then noticed on either side
// within AgentStreamTimeout: the agent's write of a heartbeat fails, and a pod that read
// nothing for that long reconnects.
const (
	AgentHeartbeatInterval = 10 * time.Second
	AgentStreamTimeout     = 30 * time.Second
)

// Per-pod detail on demand (docs/design.md §9): a node report carries what its pods add up
// to, and the agent serves their lines. GET AgentPodsPath?namespace=NS&breaker=NAME
// answers AgentPods: every pod of the node that reports breaker NAME in namespace NS,
// with its whole report (breaker is optional: all of the namespace's). It is for the
// operator and for `kubectl fusebox pods`, never for a pod: it accepts only the tokens
// (audience NodeAgentAudience) of the service accounts NodeAgentReaders names, in the
// agent's own namespace, and answers 403 to a pod's. The plugin reaches each agent
// through the API server's pods/proxy subresource, which keeps the request's
// Authorization for itself: the token then travels in AgentTokenHeader.
const (
	AgentPodsPath        = "/v1/pods"
	AgentPodsNamespace   = "namespace"
	AgentPodsBreaker     = "breaker"
	AgentTokenHeader     = "X-Fusebox-Node-Agent-Token"
	NodeAgentReaderName  = "fusebox-node-reader"
	OperatorAccountName  = "fusebox-controller-manager"
	MaxAgentPodsRequests = 8 // served at once; more get 503
)

// NodeAgentReaders are the service accounts, of the agent's namespace, whose tokens may
// read AgentPodsPath: the one `kubectl fusebox pods` requests a token of (the Role
// fusebox-node-reader lets a user do that and reach the agents through pods/proxy), and
// the operator's.
var NodeAgentReaders = []string{NodeAgentReaderName, OperatorAccountName}

// AgentPods answers GET AgentPodsPath.
type AgentPods struct {
	// Node is the agent's node; Agent its identity, as ConfigSnapshot.Agent.
	Node  string `json:"node"`
	Agent string `json:"agent"`
	// Pods are the node's pods that report, in namespace and name order.
	Pods []AgentPod `json:"pods"`
}

// AgentPod is one pod's report, as the agent holds it.
type AgentPod struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
	// Revision is the pod's revision, from its labels in the agent's pod cache.
	Revision string        `json:"revision,omitempty"`
	Breakers []ReportEntry `json:"breakers"`
}
