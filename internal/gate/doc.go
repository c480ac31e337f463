// Package gate judges a new revision of a workload by what its pods' breakers decided,
// against a baseline revision, for a progressive-delivery controller to act on
// (docs/design.md §10, docs/rollouts.md): Successful, Failed or Inconclusive, with the
// reason. The judgement is a pure function of a CircuitBreaker's spec and its
// status.revisions, so the operator's gate endpoint (internal/gateserver) and `kubectl
// fusebox gate` (internal/plugin) say the same thing of the same status.
package gate
