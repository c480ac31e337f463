// Package counting adds up what pods report of their breakers: on a node, the node
// agent's sums of its pods' lines into the entries of a NodeBreakerReport (Node); in
// the operator, the fleet's figures of a CircuitBreaker's status and rendered config
// from those entries and from the pods' own BreakerReports (Aggregate, DecideFleet,
// TrafficOf). docs/design.md §5.12, §5.17 and §9 state the rules.
//
// Everything here is a pure function over counts: no client, no cache, no clock but the
// times it is given, so that it is tested without an API server and a restarted
// operator decides what it decided before. The reconciler (internal/controller) reads
// the reports, attests their times and bounds each node's entries by its own pod cache,
// then hands the entries here; the agent (internal/nodeagent) hands its pods' lines.
//
// One carrier, one share (§5.17): a pod's own report is an entry of one pod, and a node's
// entry counts for its pods and no more. Every figure another pod acts on is a median or
// a bounded sum over pods, so that carriers speaking for fewer than half of the pods,
// whatever they say within the schema, cannot move it outside the range the others span.
package counting
